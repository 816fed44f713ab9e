//! Tests of exec through srun: the argument vector, TTY sessions on a pseudo-terminal,
//! streaming output and exit codes, and stopping the process.

use super::*;

fn settings() -> SrunSettings {
    SrunSettings {
        wrapper: vec!["runuser".into(), "-u".into(), "vkslurm".into(), "--".into()],
        srun: "/usr/bin/srun".into(),
        slurm_conf: None,
        work_dir: "/tmp".into(),
        path: "/usr/bin:/bin".into(),
    }
}

/// Settings whose "srun" is `sh -c <script>`: the argv becomes `sh -c <script> --jobid=...`
/// (sh ignores the extra arguments).
fn stand_in(script: &str) -> SrunSettings {
    SrunSettings {
        wrapper: vec!["sh".into(), "-c".into(), script.into()],
        srun: "srun-stand-in".into(),
        slurm_conf: None,
        work_dir: "/tmp".into(),
        path: "/usr/bin:/bin".into(),
    }
}

#[test]
fn the_command_is_an_argument_vector_after_the_srun_options() {
    let req = ExecRequest {
        command: vec!["sh".into(), "-c".into(), "echo $HOME; rm -rf x".into()],
        stdin: true,
        tty: false,
    };
    assert_eq!(
        argv(&settings(), 42, &req),
        [
            "runuser",
            "-u",
            "vkslurm",
            "--",
            "/usr/bin/srun",
            "--jobid=42",
            "--overlap",
            "--quiet",
            "--nodes=1",
            "--ntasks=1",
            "--chdir=/tmp",
            "--",
            "sh",
            "-c",
            "echo $HOME; rm -rf x",
        ]
    );
}

#[test]
fn tty_sessions_ask_srun_for_a_pty() {
    let req = ExecRequest {
        command: vec!["sh".into()],
        stdin: true,
        tty: true,
    };
    let v = argv(&settings(), 9, &req);
    assert_eq!(
        v[4..],
        [
            "/usr/bin/srun",
            "--jobid=9",
            "--overlap",
            "--quiet",
            "--nodes=1",
            "--ntasks=1",
            "--chdir=/tmp",
            "--pty",
            "--",
            "sh",
        ]
    );
}

#[tokio::test]
async fn a_tty_session_runs_on_a_terminal_and_follows_resizes() {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    // `sh -c <script>` stands in for srun: it sees a terminal on stdin and stdout, and
    // reports the size after SIGWINCH.
    let script = "test -t 0 && test -t 1 && echo tty-ok; \
                  trap 'stty size; exit 3' WINCH; read x; echo \"got $x\"; \
                  while :; do sleep 0.05; done";
    let s = stand_in(script);
    let req = ExecRequest {
        command: vec!["ignored".into()],
        stdin: true,
        tty: true,
    };
    let mut session = start("hpc", &s, 1, req).unwrap();
    assert!(session.stderr.is_none());
    let mut stdin = session.stdin.take().unwrap();
    stdin.write_all(b"hello\n").await.unwrap();
    stdin.flush().await.unwrap();
    let resize = session.resize.take().unwrap();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut resized = false;
    while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, session.stdout.next()).await {
        out.extend_from_slice(&chunk.unwrap());
        let text = String::from_utf8_lossy(&out);
        if !resized && text.contains("got hello") {
            resized = true;
            resize
                .send(TerminalSize {
                    width: 132,
                    height: 43,
                })
                .await
                .unwrap();
        }
    }
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("tty-ok"), "{text:?}");
    // The terminal echoes input and turns \n into \r\n, as a terminal does.
    assert!(text.contains("got hello\r\n"), "{text:?}");
    assert!(text.contains("43 132"), "{text:?}");
    assert_eq!(session.exit.await.unwrap(), 3);
}

#[tokio::test]
async fn a_size_sent_before_srun_handles_resizes_still_reaches_it() {
    use futures::StreamExt;
    // As srun does, the stand-in handles SIGWINCH only a while after it started: the client's
    // first size, sent at once, arrives before. Only a signal after the trap prints the size.
    let script = "sleep 0.7; trap 'stty size; exit 3' WINCH; while :; do sleep 0.05; done";
    let s = stand_in(script);
    let req = ExecRequest {
        command: vec!["ignored".into()],
        stdin: false,
        tty: true,
    };
    let mut session = start("hpc", &s, 1, req).unwrap();
    let size = TerminalSize {
        width: 120,
        height: 40,
    };
    // Held, as the kubelet API holds it for the whole session.
    let resize = session.resize.take().unwrap();
    resize.send(size).await.unwrap();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while let Ok(Some(chunk)) = tokio::time::timeout_at(deadline, session.stdout.next()).await {
        out.extend_from_slice(&chunk.unwrap());
    }
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("40 120"), "{text:?}");
    let exit = tokio::time::timeout(Duration::from_secs(5), session.exit).await;
    assert_eq!(exit.expect("the stand-in ended").unwrap(), 3);
}

#[tokio::test]
async fn a_process_streams_output_and_its_exit_code() {
    // Any program stands in for srun: the wrapper and srun path make the argv
    // `sh -c <script> --jobid=...` (sh ignores the extra arguments).
    let s = SrunSettings {
        wrapper: vec![
            "sh".into(),
            "-c".into(),
            "read x; echo \"out $x\"; printf 'err' >&2; echo 'srun: error: vm: task 0: Exited with exit code 7' >&2; exit 7".into(),
        ],
        srun: "srun-stand-in".into(),
        slurm_conf: None,
        work_dir: "/tmp".into(),
        path: "/usr/bin:/bin".into(),
    };
    let req = ExecRequest {
        command: vec!["ignored".into()],
        stdin: true,
        tty: false,
    };
    let mut session = start("hpc", &s, 1, req).unwrap();
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let mut stdin = session.stdin.take().unwrap();
    stdin.write_all(b"hi\n").await.unwrap();
    drop(stdin);
    let out: Vec<u8> = session
        .stdout
        .flat_map(|c| futures::stream::iter(c.unwrap().to_vec()))
        .collect()
        .await;
    let err: Vec<u8> = session
        .stderr
        .take()
        .unwrap()
        .flat_map(|c| futures::stream::iter(c.unwrap().to_vec()))
        .collect()
        .await;
    assert_eq!(out, b"out hi\n");
    assert_eq!(err, b"err");
    assert_eq!(session.exit.await.unwrap(), 7);
}

#[tokio::test]
async fn dropping_the_session_stops_the_process() {
    let dir = std::env::temp_dir().join(format!("vk-exec-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid_file = dir.join("pid");
    let script = format!(
        "echo $$ > {}; echo ready; while :; do sleep 0.1; done",
        pid_file.display()
    );
    let s = SrunSettings {
        wrapper: vec!["sh".into(), "-c".into(), script],
        srun: "srun-stand-in".into(),
        slurm_conf: None,
        work_dir: "/tmp".into(),
        path: "/usr/bin:/bin".into(),
    };
    let req = ExecRequest {
        command: vec!["ignored".into()],
        stdin: false,
        tty: false,
    };
    let mut session = start("hpc", &s, 1, req).unwrap();
    use futures::StreamExt;
    let first = session.stdout.next().await.unwrap().unwrap();
    assert_eq!(&first[..], b"ready\n");
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_owned();
    let alive = |pid: &str| {
        // Gone, or a zombie waiting to be reaped: either way it no longer runs.
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|st| {
                st.rsplit(')')
                    .next()
                    .map(|r| !r.trim_start().starts_with('Z'))
            })
            .unwrap_or(false)
    };
    assert!(alive(&pid), "the command runs while the session is held");
    drop(session);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    while alive(&pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the command still runs 15 s after its session was dropped"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}
