//! Container logs of Slurm jobs, served from the jobs' output files when the VK can read the
//! configured `outputDir` (a shared file system, or the VK running on a login node). The batch
//! script's stdout and stderr both go to `<outputDir>/slurm-<job id>.log`.

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

/// The output file of job `job_id` (the pattern the adapter submits is `slurm-%j.log`).
pub(crate) fn log_path(dir: &Path, job_id: u64) -> PathBuf {
    dir.join(format!("slurm-{job_id}.log"))
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

/// Reads the whole file; a missing file (job not started yet) is empty.
pub(crate) async fn read_all(path: &Path) -> Result<Vec<u8>, ProviderError> {
    match tokio::fs::read(path).await {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(ProviderError::transient(format!(
            "cannot read the job's output file {}: {e}",
            path.display()
        ))),
    }
}

/// Bytes appended to `path` after `offset` (at most one chunk); empty when there are none.
pub(crate) async fn read_from(path: &Path, offset: u64) -> Result<Bytes, ProviderError> {
    let err = |e: std::io::Error| {
        ProviderError::transient(format!(
            "cannot read the job's output file {}: {e}",
            path.display()
        ))
    };
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Bytes::new()),
        Err(e) => return Err(err(e)),
    };
    let len = file.metadata().await.map_err(err)?.len();
    if len <= offset {
        return Ok(Bytes::new());
    }
    file.seek(SeekFrom::Start(offset)).await.map_err(err)?;
    let mut buf = Vec::new();
    file.take(CHUNK.min(len - offset))
        .read_to_end(&mut buf)
        .await
        .map_err(err)?;
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
        assert_eq!(read_all(&path).await.unwrap(), b"hello\n");
        std::fs::remove_file(&path).unwrap();
        assert!(read_all(&path).await.unwrap().is_empty());
    }
}
