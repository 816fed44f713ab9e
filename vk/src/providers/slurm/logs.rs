//! Container logs of Slurm jobs, served from the jobs' output files when the VK can read the
//! configured `outputDir` (a shared file system, or the VK running on a login node). The batch
//! script's stdout and stderr both go to `<outputDir>/slurm-<job id>.log`.
//!
//! The job controls that path: it may replace its output file by a symlink (to the VK's own
//! service-account token, `/dev/zero`) or a FIFO. So the file is opened without following
//! links and without blocking, must be a regular file, and only a bounded tail is read.

use std::io::SeekFrom;
use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::provider::ProviderError;

/// Pause between two reads of a followed log.
pub(crate) const FOLLOW_POLL: Duration = Duration::from_millis(500);
/// A followed log asks Slurm whether the job is still alive every this many polls.
pub(crate) const STATE_CHECK_EVERY: u32 = 4;
/// Largest piece read at once while following.
const CHUNK: u64 = 256 * 1024;
/// Most bytes of a job's output read for one request: the tail of a longer file.
pub(crate) const MAX_READ: u64 = 8 * 1024 * 1024;

/// The output file of job `job_id` (the pattern the adapter submits is `slurm-%j.log`).
pub(crate) fn log_path(dir: &Path, job_id: u64) -> PathBuf {
    dir.join(format!("slurm-{job_id}.log"))
}

/// The output file of container `name` of job `job_id`, for jobs running each container as a
/// step (`super::steps`).
pub(crate) fn container_log_path(dir: &Path, job_id: u64, name: &str) -> PathBuf {
    dir.join(format!("slurm-{job_id}.{name}.log"))
}

/// The exit-code file of container `name` of job `job_id` (`super::steps`).
pub(crate) fn container_exit_path(dir: &Path, job_id: u64, name: &str) -> PathBuf {
    dir.join(format!("slurm-{job_id}.{name}.exit"))
}

/// The exit code in a container's `.exit` file and when it was written; `None` while there
/// is none (the container runs), or when the file is not a regular file holding a number
/// (the job writes it, so it is read like an output file: no links followed, a few bytes).
pub(crate) async fn read_exit(path: &Path) -> Option<(i32, std::time::SystemTime)> {
    let (file, meta) = open(path).await.ok()??;
    let mut buf = Vec::new();
    file.take(16).read_to_end(&mut buf).await.ok()?;
    let code = std::str::from_utf8(&buf).ok()?.trim().parse().ok()?;
    Some((code, meta.modified().ok()?))
}

/// The output file pattern sent with the job.
pub(crate) fn output_pattern(dir: &Path) -> String {
    dir.join("slurm-%j.log").to_string_lossy().into_owned()
}

/// The last `tail_lines` lines of `content` (all when `None`).
pub(crate) fn tail(content: &[u8], tail_lines: Option<u64>) -> &[u8] {
    let Some(n) = tail_lines else {
        return content;
    };
    if n == 0 {
        return &content[content.len()..];
    }
    // A trailing newline ends the last line; it does not start another one.
    let body = content.strip_suffix(b"\n").unwrap_or(content);
    let mut seen = 0u64;
    for (i, b) in body.iter().enumerate().rev() {
        if *b == b'\n' {
            seen += 1;
            if seen == n {
                return &content[i + 1..];
            }
        }
    }
    content
}

fn unreadable(path: &Path, e: std::io::Error) -> ProviderError {
    ProviderError::transient(format!(
        "cannot read the job's output file {}: {e}",
        path.display()
    ))
}

/// Opens a job's output file safely (see the module docs) with its metadata; `None` when it
/// does not exist yet (the job has not started).
async fn open(path: &Path) -> Result<Option<(tokio::fs::File, std::fs::Metadata)>, ProviderError> {
    use rustix::fs::OFlags;
    let refused = |what: &str| ProviderError::Invalid {
        message: format!(
            "the job's output file {} is {what}; only a regular file is served",
            path.display()
        ),
    };
    let mut options = tokio::fs::OpenOptions::new();
    options
        .read(true)
        .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC).bits() as i32);
    let file = match options.open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            return Err(refused("a symbolic link"));
        }
        Err(e) => return Err(unreadable(path, e)),
    };
    let meta = file.metadata().await.map_err(|e| unreadable(path, e))?;
    if !meta.file_type().is_file() {
        return Err(refused("not a regular file"));
    }
    Ok(Some((file, meta)))
}

/// The last `max` bytes of the file (all of a shorter one); a missing file is empty.
pub(crate) async fn read_tail(path: &Path, max: u64) -> Result<Vec<u8>, ProviderError> {
    let Some((mut file, meta)) = open(path).await? else {
        return Ok(Vec::new());
    };
    let len = meta.len();
    let start = len.saturating_sub(max);
    file.seek(SeekFrom::Start(start))
        .await
        .map_err(|e| unreadable(path, e))?;
    let mut buf = Vec::new();
    file.take(max)
        .read_to_end(&mut buf)
        .await
        .map_err(|e| unreadable(path, e))?;
    Ok(buf)
}

/// Bytes appended to `path` after `offset` (at most one chunk); empty when there are none.
pub(crate) async fn read_from(path: &Path, offset: u64) -> Result<Bytes, ProviderError> {
    let Some((mut file, meta)) = open(path).await? else {
        return Ok(Bytes::new());
    };
    let len = meta.len();
    if len <= offset {
        return Ok(Bytes::new());
    }
    file.seek(SeekFrom::Start(offset))
        .await
        .map_err(|e| unreadable(path, e))?;
    let mut buf = Vec::new();
    file.take(CHUNK.min(len - offset))
        .read_to_end(&mut buf)
        .await
        .map_err(|e| unreadable(path, e))?;
    Ok(Bytes::from(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_lines() {
        let c = b"a\nb\nc\n";
        assert_eq!(tail(c, None), c);
        assert_eq!(tail(c, Some(1)), b"c\n");
        assert_eq!(tail(c, Some(2)), b"b\nc\n");
        assert_eq!(tail(c, Some(9)), c);
        assert_eq!(tail(c, Some(0)), b"");
        assert_eq!(tail(b"a\nb", Some(1)), b"b");
        assert_eq!(tail(b"", Some(3)), b"");
    }

    #[tokio::test]
    async fn reads_appended_bytes() {
        let path = std::env::temp_dir().join(format!("vk-slurm-log-{}", std::process::id()));
        assert!(read_from(&path, 0).await.unwrap().is_empty());
        std::fs::write(&path, "hello\n").unwrap();
        assert_eq!(read_from(&path, 0).await.unwrap(), Bytes::from("hello\n"));
        assert!(read_from(&path, 6).await.unwrap().is_empty());
        assert_eq!(read_tail(&path, MAX_READ).await.unwrap(), b"hello\n");
        assert_eq!(read_tail(&path, 3).await.unwrap(), b"lo\n");
        std::fs::remove_file(&path).unwrap();
        assert!(read_tail(&path, MAX_READ).await.unwrap().is_empty());
    }

    /// A scratch directory a job could write into.
    fn job_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vk-slurm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[tokio::test]
    async fn a_symlink_planted_by_the_job_is_not_followed() {
        let dir = job_dir("symlink");
        let secret = dir.join("token");
        std::fs::write(&secret, "service-account-token").unwrap();
        let log = log_path(&dir, 7);
        std::os::unix::fs::symlink(&secret, &log).unwrap();
        for r in [
            read_tail(&log, MAX_READ).await.map(Bytes::from),
            read_from(&log, 0).await,
        ] {
            let e = r.expect_err("a symlink must be refused");
            assert!(
                matches!(&e, ProviderError::Invalid { message } if message.contains("symbolic link")),
                "{e:?}"
            );
        }
        // /dev/zero through a link would never end: refused the same way.
        let zero = log_path(&dir, 8);
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        assert!(read_tail(&zero, MAX_READ).await.is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_fifo_is_refused_without_hanging() {
        let dir = job_dir("fifo");
        let log = log_path(&dir, 9);
        let made = std::process::Command::new("mkfifo")
            .arg(&log)
            .status()
            .unwrap();
        assert!(made.success());
        let r = tokio::time::timeout(Duration::from_secs(5), read_tail(&log, MAX_READ))
            .await
            .expect("opening a FIFO must not block");
        assert!(
            matches!(&r, Err(ProviderError::Invalid { message }) if message.contains("not a regular file")),
            "{r:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[tokio::test]
    async fn a_huge_log_is_served_as_a_bounded_tail() {
        let dir = job_dir("huge");
        let log = log_path(&dir, 10);
        let mut content = vec![b'x'; 4096];
        content.extend_from_slice(b"\nlast line\n");
        std::fs::write(&log, &content).unwrap();
        let got = read_tail(&log, 64).await.unwrap();
        assert_eq!(got.len(), 64);
        assert!(got.ends_with(b"last line\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
