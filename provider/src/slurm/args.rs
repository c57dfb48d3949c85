//! The user's Slurm arguments: one string as typed (`--partition=gpu --time=60 --gres gpu:1`),
//! split into words the way a POSIX shell would split it (quotes and backslashes, no expansion),
//! stored as words, handed to `salloc`/`sbatch` as words.

use crate::error::{Error, Result};

/// Arguments the engine sets itself: a user's value would break the mechanism.
const RESERVED: &[&str] = &[
    "--no-shell",
    "--job-name",
    "-J",
    "--output",
    "-o",
    "--error",
    "-e",
    "--chdir",
    "-D",
    "--wrap",
    "--parsable",
    "--immediate",
    "-I",
];

/// Split `text` into words: whitespace separates, '...' and "..." quote, a backslash escapes
/// the next character (outside single quotes). No variable or command expansion.
pub fn split_args(text: &str) -> Result<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(unbalanced(text, '\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(unbalanced(text, '"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(unbalanced(text, '"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    check_words(&words)?;
    Ok(words)
}

/// Refuse words the engine cannot pass on (control characters) or sets itself.
pub fn check_words(words: &[String]) -> Result<()> {
    for w in words {
        if w.chars().any(|c| c == '\n' || c == '\0') {
            return Err(Error::invalid(
                "a Slurm argument must not hold a newline or NUL; give each on one line",
            ));
        }
        let name = w.split('=').next().unwrap_or(w);
        if RESERVED.contains(&name) {
            return Err(Error::invalid(format!(
                "the Slurm argument {name} is set by remote-runner itself (job name, output \
                 files, working directory, the wait bound); leave it out of the Slurm arguments"
            )));
        }
    }
    Ok(())
}

fn unbalanced(text: &str, quote: char) -> Error {
    Error::invalid(format!(
        "the Slurm arguments {text:?} have an unbalanced {quote}; close the quote"
    ))
}

/// The words of the machine's defaults followed by those of this call (Slurm takes the last
/// value of a repeated option, so the call's win).
pub fn merged(defaults: &[String], extra: &[String]) -> Vec<String> {
    defaults.iter().chain(extra).cloned().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_like_a_shell() {
        assert_eq!(
            split_args(" --partition=gpu  --time=60 --comment 'two words' -A\"a b\" x\\ y")
                .unwrap(),
            vec![
                "--partition=gpu",
                "--time=60",
                "--comment",
                "two words",
                "-Aa b",
                "x y"
            ]
        );
        assert_eq!(split_args("").unwrap(), Vec::<String>::new());
        assert_eq!(split_args("''").unwrap(), vec![String::new()]);
    }

    #[test]
    fn refuses_unbalanced_quotes_and_reserved_options() {
        assert!(split_args("--comment 'x").is_err());
        assert!(split_args("--no-shell").is_err());
        assert!(split_args("--job-name=x").is_err());
        assert!(split_args("--output=/tmp/x").is_err());
    }
}
