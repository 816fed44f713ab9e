//! Where a job's output goes: its `standard_output` pattern, expanded as Slurm does.

use super::Job;

/// Where a job's stdout and stderr go: its `standard_output` pattern, or Slurm's default
/// `<cwd>/slurm-%j.out`.
pub fn output_path(job: &Job) -> String {
    match &job.spec.standard_output {
        Some(p) if !p.is_empty() => expand_pattern(p, job),
        _ => format!(
            "{}/slurm-{}.out",
            job.spec.cwd.trim_end_matches('/'),
            job.id
        ),
    }
}

/// Replaces `%j`, `%x`, `%u` and `%%` in an output path pattern.
pub fn expand_pattern(pattern: &str, job: &Job) -> String {
    let mut out = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') | Some('A') => out.push_str(&job.id.to_string()),
            Some('x') => out.push_str(&job.spec.name),
            Some('u') => out.push_str(&job.user),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}
