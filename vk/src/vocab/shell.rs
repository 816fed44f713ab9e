//! Shell words: quoting a value so a POSIX shell reads it back unchanged, and joining argv into
//! one command line. Used wherever a workload's command passes through a shell (Slurm batch
//! scripts, RunPod's `args`, init containers run before the main one).

/// One single-quoted shell word (`''` for the empty string): the one quoting form in which a
/// POSIX shell interprets nothing, so any byte except NUL survives intact.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    out.push_str(&value.replace('\'', r"'\''"));
    out.push('\'');
    out
}

/// Joins argv into one string a POSIX shell splits back into the same words; words made only
/// of characters no shell treats specially stay unquoted, for readability.
pub fn shell_join<'a>(words: impl IntoIterator<Item = &'a str>) -> String {
    let mut out = String::new();
    for w in words {
        if !out.is_empty() {
            out.push(' ');
        }
        let safe = !w.is_empty()
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_./:=,+@%".contains(&b));
        if safe {
            out.push_str(w);
        } else {
            out.push_str(&quote(w));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_join_round_trips_through_a_shell_parser() {
        assert_eq!(
            shell_join(["python", "-c", "print('hi there')"]),
            r#"python -c 'print('\''hi there'\'')'"#
        );
        assert_eq!(shell_join(["a", "", "b c", "$HOME"]), "a '' 'b c' '$HOME'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }
}
