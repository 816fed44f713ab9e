//! `/attach` as a session over the container's log: what the container writes from the moment
//! of the attach on, until it ends, served through the same transports as exec.
//!
//! A kubelet attaches to the stdio of the container's main process. No provider hands out the
//! main process's stdio; what each one does hand out is its output, as a followed log. So an
//! attach is the provider's log followed from its current end (`follow`, `tailLines=0`):
//! output written after the attach, none written before it, as with the kubelet (which replays
//! nothing). The session ends when the log ends (the container has ended) with a `Success`
//! status, as the kubelet's `ServeAttach` does once the runtime's attach returns.
//!
//! Standard input: a container without `stdin: true` (the default) was never given an open
//! stdin, and its runtime drops what an attach sends (containerd does); the same here. A
//! container with `stdin: true` expects to read what is typed, which no provider can deliver
//! to its main process, so that attach is refused with the reason ([`stdin_refusal`]).

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::oneshot;

use crate::provider::{ExecSession, LogStream, ProviderError};

/// The session of an attach reading `output`; with `stdin`, the client's input is taken and
/// dropped.
pub fn session(output: LogStream, stdin: bool) -> ExecSession {
    let (ended, on_end) = oneshot::channel();
    ExecSession {
        stdin: stdin.then(|| Box::pin(tokio::io::sink()) as crate::provider::ExecStdin),
        stdout: Box::pin(Ending {
            inner: output,
            ended: Some(ended),
        }),
        stderr: None,
        resize: None,
        // The "command" of an attach is the container: it is over when its output is.
        exit: Box::pin(async move {
            let _ = on_end.await;
            Ok(0)
        }),
    }
}

/// Why an attach asking for stdin is refused, if it is: the container reads its stdin
/// (`stdin: true`) and the provider has no way to write to it.
pub fn stdin_refusal(provider: &str, container: &str, reads_stdin: bool) -> Option<ProviderError> {
    reads_stdin.then(|| ProviderError::Unsupported {
        provider: provider.to_owned(),
        what: format!(
            "attach to the standard input of container \"{container}\" (it sets stdin: true, \
             and a workload's main process reads no input there; attach without -i shows its \
             output)"
        ),
    })
}

/// A log stream that says when it has ended.
struct Ending {
    inner: LogStream,
    ended: Option<oneshot::Sender<()>>,
}

impl Stream for Ending {
    type Item = Result<bytes::Bytes, ProviderError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = self.inner.as_mut().poll_next(cx);
        if let Poll::Ready(None) = next
            && let Some(tx) = self.ended.take()
        {
            let _ = tx.send(());
        }
        next
    }
}

/// Opens an attach's session (this module's [`session`]): the container's log followed from its end (the
/// container's own log where the provider keeps one per container).
pub(super) async fn start(
    p: &k8s_openapi::api::core::v1::Pod,
    provider: &dyn crate::provider::DynProvider,
    observed: &crate::provider::Observed,
    container: &str,
    opts: &super::StreamOptions,
) -> Result<crate::provider::ExecSession, crate::kubelet_api::ApiError> {
    let name = provider.name();
    let spec = p.spec.as_ref();
    let reads_stdin = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .any(|c| c.name == container && c.stdin == Some(true));
    if opts.stdin
        && let Some(e) = stdin_refusal(name, container, reads_stdin)
    {
        return Err(crate::kubelet_api::ApiError::from_provider(name, &e));
    }
    let log = crate::provider::LogOptions {
        follow: true,
        tail_lines: Some(0),
        container: crate::kubelet_api::logs::own_log(provider, p, container),
        ..Default::default()
    };
    // The provider call layer bounds opening the stream by its timeout.
    let output = provider
        .logs(&observed.provider_id, &log)
        .await
        .map_err(|e| crate::kubelet_api::ApiError::from_provider(name, &e))?;
    Ok(session(output, opts.stdin))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use futures::StreamExt;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn the_exit_waits_for_the_output_to_end_and_is_success() {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<Bytes, ProviderError>>();
        let output: LogStream = Box::pin(rx);
        let mut s = session(output, false);
        assert!(s.stdin.is_none());
        tx.unbounded_send(Ok(Bytes::from_static(b"line 1\n")))
            .unwrap();
        assert_eq!(s.stdout.next().await.unwrap().unwrap(), "line 1\n");
        // While the container writes on, the attach is not over.
        let mut exit = s.exit;
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut exit)
                .await
                .is_err(),
            "the exit resolved before the output ended"
        );
        drop(tx);
        assert!(s.stdout.next().await.is_none());
        assert_eq!(exit.await.unwrap(), 0);
    }

    #[tokio::test]
    async fn stdin_is_taken_and_dropped() {
        let output: LogStream = Box::pin(futures::stream::empty());
        let mut s = session(output, true);
        let mut stdin = s.stdin.take().expect("stdin was asked for");
        stdin.write_all(b"typed\n").await.unwrap();
        stdin.shutdown().await.unwrap();
    }

    #[test]
    fn only_a_container_reading_stdin_refuses() {
        assert!(stdin_refusal("cloud", "main", false).is_none());
        let e = stdin_refusal("cloud", "main", true).unwrap().to_string();
        assert!(e.starts_with("not supported by provider cloud: attach to the standard input of container \"main\""), "{e}");
    }
}
