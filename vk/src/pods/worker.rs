//! One worker of the pipeline: takes keys from the queue until it shuts down and reconciles
//! each. A panic in a reconcile is a bug, never a pod's state: it is caught, logged and counted,
//! the key is released (otherwise it would stay "processing" and never be handed out again) and
//! retried with back-off, and the worker goes on (otherwise each panic would cost one worker).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

use super::queue::Queue;

/// Which keys a worker takes: every key, or only the lane of pods that just arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    All,
    First,
}

/// Serves keys of `lane` until the queue shuts down: `work` for each, then `done`. A panic in
/// `work` goes to `panicked` (with its message), and the key is retried with back-off.
pub async fn serve<W, F>(queue: &Queue, lane: Lane, work: W, panicked: impl Fn(&str, &str))
where
    W: Fn(String) -> F,
    F: Future<Output = ()>,
{
    loop {
        let key = match lane {
            Lane::All => queue.next().await,
            Lane::First => queue.next_first().await,
        };
        let Some(key) = key else { return };
        if let Err(panic) = AssertUnwindSafe(work(key.clone())).catch_unwind().await {
            panicked(&key, &message(panic.as_ref()));
            queue.retry(&key);
        }
        queue.done(&key);
    }
}

/// The text a panic carries (`panic!` with a literal or a format), else a placeholder.
fn message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic without a message)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_panicking_reconcile_releases_its_key_for_a_retry_and_the_worker_goes_on() {
        let queue = Arc::new(Queue::new());
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let panics = Arc::new(Mutex::new(Vec::<(String, String)>::new()));
        let worker = {
            let (queue, seen, panics) = (queue.clone(), seen.clone(), panics.clone());
            tokio::spawn(async move {
                serve(
                    &queue,
                    Lane::All,
                    |key| {
                        let seen = seen.clone();
                        async move {
                            let first = {
                                let mut s = seen.lock().unwrap();
                                s.push(key.clone());
                                s.iter().filter(|k| **k == key).count() == 1
                            };
                            // The first reconcile of "bad" hits a bug.
                            assert!(!(key == "bad" && first), "deadline overflow in {key}");
                        }
                    },
                    |key, msg| panics.lock().unwrap().push((key.into(), msg.into())),
                )
                .await;
            })
        };
        queue.add("bad");
        queue.add("good");
        // "bad" comes back after its back-off (the first retry waits backoff(0)), and the one
        // worker is still there to serve it and "good".
        tokio::time::timeout(Duration::from_secs(5), async {
            while seen.lock().unwrap().len() < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the key of a panicked reconcile was never handed out again");
        let mut order = seen.lock().unwrap().clone();
        order.sort();
        assert_eq!(order, ["bad", "bad", "good"]);
        assert_eq!(
            *panics.lock().unwrap(),
            [("bad".to_owned(), "deadline overflow in bad".to_owned())]
        );
        queue.shutdown();
        tokio::time::timeout(Duration::from_secs(1), worker)
            .await
            .expect("the worker ends when the queue shuts down")
            .expect("the worker itself never panics");
    }

    #[test]
    fn panic_messages_are_read_from_both_payload_kinds() {
        assert_eq!(message(&"literal"), "literal");
        assert_eq!(message(&format!("formatted {}", 1)), "formatted 1");
        assert_eq!(message(&42_u8), "(a panic without a message)");
    }
}
