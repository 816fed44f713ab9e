//! A TTY exec session (`kubectl exec -it`) through the API server: a terminal, its size and
//! its change, echoed input, the exit code.

use super::*;

/// A TTY session (`kubectl exec -it`), here through kube-rs' WebSocket client: the command sees
/// a terminal, gets the client's terminal size (and its change), input is echoed by the
/// remote terminal, and the exit code comes back.
#[tokio::test]
async fn a_tty_session_through_the_api_server() {
    let _turn = SERIAL.lock().await;
    let bed = Bed::start().await;
    bed.running_pod("shell", SLURM).await;
    let pods: Api<Pod> = Api::namespaced(bed.c.clone(), &bed.ns);
    let script = "test -t 0 && echo on-a-tty; read x; echo \"got $x\"; stty size; exit 4";
    let mut p = pods
        .exec(
            "shell",
            ["sh", "-c", script],
            &AttachParams::interactive_tty(),
        )
        .await
        .unwrap();
    let mut size = p.terminal_size().unwrap();
    size.send(TerminalSize {
        width: 100,
        height: 30,
    })
    .await
    .unwrap();
    let mut stdout = p.stdout().unwrap();
    let mut stdin = p.stdin().unwrap();
    let status = p.take_status().unwrap();
    // The size is applied before the command reads its input.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stdin.write_all(b"typed\n").await.unwrap();
    let mut out = String::new();
    let read = async {
        let mut buf = [0u8; 1024];
        loop {
            let n = stdout.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            out.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .expect("the TTY session ended");
    eprintln!("TTY output: {out:?}");
    assert!(out.contains("on-a-tty"), "{out:?}");
    // Echoed by the remote terminal, then answered; terminals end lines with \r\n.
    assert!(out.contains("typed\r\n"), "{out:?}");
    assert!(out.contains("got typed\r\n"), "{out:?}");
    assert!(out.contains("30 100"), "{out:?}");
    assert!(!out.contains("srun:"), "{out:?}");
    let status = tokio::time::timeout(Duration::from_secs(10), status)
        .await
        .unwrap()
        .expect("a status");
    assert_eq!(
        status.reason.as_deref(),
        Some("NonZeroExitCode"),
        "{status:?}"
    );
    let cause = &status.details.unwrap().causes.unwrap()[0];
    assert_eq!(
        (cause.reason.as_deref(), cause.message.as_deref()),
        (Some("ExitCode"), Some("4"))
    );
    bed.finish().await;
}
