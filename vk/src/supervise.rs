//! Supervision of the long-running tasks a VK is made of (pod watch, provider observers,
//! workers, garbage collector, node lease, kubelet API): they run until shutdown, and if one
//! ends or panics first the whole process must end, so Kubernetes restarts it, instead of
//! limping on half-dead (a VK without its pod watch still renews its lease and looks healthy).

use std::collections::HashMap;
use std::future::Future;

use tokio::task::JoinSet;
use tracing::error;

/// A task that was meant to run until shutdown ended first.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("task {task} {how} before shutdown")]
pub struct TaskEnded {
    pub task: String,
    /// `"panicked"` or `"returned"`.
    pub how: &'static str,
}

/// Named tasks that run until shutdown.
#[derive(Default)]
pub struct Supervisor {
    tasks: JoinSet<()>,
    names: HashMap<tokio::task::Id, String>,
}

impl Supervisor {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `task` under `name`.
    pub fn spawn(
        &mut self,
        name: impl Into<String>,
        task: impl Future<Output = ()> + Send + 'static,
    ) {
        let handle = self.tasks.spawn(task);
        self.names.insert(handle.id(), name.into());
    }

    /// Runs until `shutdown` resolves (then aborts every task and returns `Ok`), or until a
    /// task ends or panics first (then aborts the others and says which).
    pub async fn run(mut self, shutdown: impl Future<Output = ()>) -> Result<(), TaskEnded> {
        tokio::pin!(shutdown);
        let ended = tokio::select! {
            () = &mut shutdown => None,
            Some(r) = self.tasks.join_next_with_id() => Some(r),
        };
        self.tasks.abort_all();
        let Some(r) = ended else {
            return Ok(());
        };
        let (id, how) = match r {
            Ok((id, ())) => (id, "returned"),
            Err(e) => (
                e.id(),
                if e.is_panic() {
                    "panicked"
                } else {
                    "was cancelled"
                },
            ),
        };
        let task = self.names.remove(&id).unwrap_or_else(|| "unnamed".into());
        error!(
            task,
            how, "a core task ended before shutdown: stopping the process"
        );
        Err(TaskEnded { task, how })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn forever() -> impl Future<Output = ()> + Send + 'static {
        std::future::pending()
    }

    #[tokio::test]
    async fn a_panicking_task_ends_the_run_and_is_named() {
        let mut s = Supervisor::new();
        s.spawn("watch", forever());
        s.spawn("gc", async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            panic!("bug in the collector");
        });
        let r = s.run(forever()).await;
        assert_eq!(
            r,
            Err(TaskEnded {
                task: "gc".into(),
                how: "panicked"
            })
        );
    }

    #[tokio::test]
    async fn a_task_that_returns_early_ends_the_run() {
        let mut s = Supervisor::new();
        s.spawn("watch", async {});
        s.spawn("lease", forever());
        let r = s.run(forever()).await;
        assert_eq!(
            r.map_err(|e| (e.task, e.how)),
            Err(("watch".into(), "returned"))
        );
    }

    #[tokio::test]
    async fn shutdown_stops_every_task_and_is_ok() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        struct Flag(Option<tokio::sync::oneshot::Sender<()>>);
        impl Drop for Flag {
            fn drop(&mut self) {
                if let Some(t) = self.0.take() {
                    let _ = t.send(());
                }
            }
        }
        let mut s = Supervisor::new();
        let flag = Flag(Some(tx));
        s.spawn("observe", async move {
            let _flag = flag;
            std::future::pending::<()>().await;
        });
        let r = s.run(tokio::time::sleep(Duration::from_millis(10))).await;
        assert_eq!(r, Ok(()));
        // The task was aborted (its state dropped), not left running.
        tokio::time::timeout(Duration::from_secs(1), rx)
            .await
            .expect("the task is dropped on shutdown")
            .expect("dropped, not forgotten");
    }
}
