//! The user's Slurm arguments: one string as typed (`--partition=gpu --time=60 --gres gpu:1`),
//! split into words the way a POSIX shell would split it (quotes and backslashes, no expansion),
//! stored as words, handed to `salloc`/`sbatch` as words.

use crate::error::{Error, Result};

/// Whether a Slurm option takes a value, as in its `struct option` (getopt_long).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Arg {
    /// `--hold`, `-H`.
    No,
    /// `--time=60`, `--time 60`, `-t60`, `-t 60`.
    Required,
    /// `--exclusive[=user]`, `-I[secs]`: a value only when attached.
    Optional,
}

/// One option of `salloc` or `sbatch`: its long name, its short letter (if any), its value.
struct Opt {
    long: &'static str,
    short: Option<char>,
    arg: Arg,
}

const fn opt(long: &'static str, short: Option<char>, arg: Arg) -> Opt {
    Opt { long, short, arg }
}

/// The options `salloc` and `sbatch` know (Slurm's `src/common/slurm_opt.c`, the union of the
/// two commands). Used to parse the user's words the way their `getopt_long` does: which word
/// is an option and which is a value, what an abbreviated long option stands for, where a
/// cluster of short options ends. An option missing here (a newer Slurm, a site's SPANK plugin)
/// is still checked: an unknown word that starts with `-` is never taken for a value.
const OPTIONS: &[Opt] = {
    use Arg::{No, Optional as Opt_, Required as Req};
    &[
        opt("account", Some('A'), Req),
        opt("acctg-freq", None, Req),
        opt("array", Some('a'), Req),
        opt("autocomplete", None, Req),
        opt("batch", None, Req),
        opt("bb", None, Req),
        opt("bbf", None, Req),
        opt("begin", Some('b'), Req),
        opt("bell", None, No),
        opt("chdir", Some('D'), Req),
        opt("cluster", None, Req),
        opt("cluster-constraint", None, Req),
        opt("clusters", Some('M'), Req),
        opt("comment", None, Req),
        opt("consolidate-segments", None, No),
        opt("constraint", Some('C'), Req),
        opt("container", None, Req),
        opt("container-id", None, Req),
        opt("context", None, Req),
        opt("contiguous", None, No),
        opt("core-spec", Some('S'), Req),
        opt("cores-per-socket", None, Req),
        opt("cpu-freq", None, Req),
        opt("cpus-per-gpu", None, Req),
        opt("cpus-per-task", Some('c'), Req),
        opt("deadline", None, Req),
        opt("delay-boot", None, Req),
        opt("dependency", Some('d'), Req),
        opt("distribution", Some('m'), Req),
        opt("error", Some('e'), Req),
        opt("exclude", Some('x'), Req),
        opt("exclusive", None, Opt_),
        opt("export", None, Req),
        opt("export-file", None, Req),
        opt("external", None, No),
        opt("extra", None, Req),
        opt("extra-node-info", Some('B'), Req),
        opt("get-user-env", None, Opt_),
        opt("gid", None, Req),
        opt("gpu-bind", None, Req),
        opt("gpu-freq", None, Req),
        opt("gpus", Some('G'), Req),
        opt("gpus-per-node", None, Req),
        opt("gpus-per-socket", None, Req),
        opt("gpus-per-task", None, Req),
        opt("gres", None, Req),
        opt("gres-flags", None, Req),
        opt("help", Some('h'), No),
        opt("hint", None, Req),
        opt("hold", Some('H'), No),
        opt("ignore-pbs", None, No),
        opt("immediate", Some('I'), Opt_),
        opt("input", Some('i'), Req),
        opt("job-name", Some('J'), Req),
        opt("kill-command", Some('K'), Opt_),
        opt("kill-on-invalid-dep", None, Req),
        opt("licenses", Some('L'), Req),
        opt("mail-type", None, Req),
        opt("mail-user", None, Req),
        opt("mcs-label", None, Req),
        opt("mem", None, Req),
        opt("mem-bind", None, Req),
        opt("mem-per-cpu", None, Req),
        opt("mem-per-gpu", None, Req),
        opt("mem-update", None, Req),
        opt("mincpus", None, Req),
        opt("network", None, Req),
        opt("nice", None, Opt_),
        opt("no-bell", None, No),
        opt("no-kill", Some('k'), Opt_),
        opt("no-requeue", None, No),
        opt("no-shell", None, No),
        opt("nodefile", Some('F'), Req),
        opt("nodelist", Some('w'), Req),
        opt("nodes", Some('N'), Req),
        opt("ntasks", Some('n'), Req),
        opt("ntasks-per-core", None, Req),
        opt("ntasks-per-gpu", None, Req),
        opt("ntasks-per-node", None, Req),
        opt("ntasks-per-socket", None, Req),
        opt("ntasks-per-tres", None, Req),
        opt("oom-kill-step", None, Opt_),
        opt("open-mode", None, Req),
        opt("output", Some('o'), Req),
        opt("overcommit", Some('O'), No),
        opt("oversubscribe", Some('s'), No),
        opt("parsable", None, No),
        opt("partition", Some('p'), Req),
        opt("power", None, Req),
        opt("prefer", None, Req),
        opt("priority", None, Req),
        opt("profile", None, Req),
        opt("propagate", None, Opt_),
        opt("qos", Some('q'), Req),
        opt("quiet", Some('Q'), No),
        opt("reboot", None, No),
        opt("requeue", None, Opt_),
        opt("reservation", None, Req),
        opt("resources", None, Req),
        opt("resv-ports", None, Opt_),
        opt("runtime", None, Req),
        opt("segment", None, Req),
        opt("signal", None, Req),
        opt("sockets-per-node", None, Req),
        opt("spread-job", None, No),
        opt("spread-segments", None, No),
        opt("stepmgr", None, No),
        opt("switches", None, Req),
        opt("tasks-per-node", None, Req),
        opt("test-only", None, No),
        opt("thread-spec", None, Req),
        opt("threads-per-core", None, Req),
        opt("time", Some('t'), Req),
        opt("time-min", None, Req),
        opt("tmp", None, Req),
        opt("tres-bind", None, Req),
        opt("tres-per-task", None, Req),
        opt("uid", None, Req),
        opt("usage", None, No),
        opt("use-min-nodes", None, No),
        opt("verbose", Some('v'), No),
        opt("version", Some('V'), No),
        opt("wait", Some('W'), No),
        opt("wait-all-nodes", None, Req),
        opt("wckey", None, Req),
        opt("workdir", None, Req),
        opt("wrap", None, Req),
        opt("x11", None, Opt_),
    ]
};

/// Options the engine sets itself (long names; their short letters follow from `OPTIONS`): a
/// user's value would break the mechanism. `workdir` is `chdir`'s old name.
const RESERVED: &[&str] = &[
    "no-shell",
    "job-name",
    "output",
    "error",
    "chdir",
    "workdir",
    "wrap",
    "parsable",
    "immediate",
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

/// Refuse words the engine cannot pass on (control characters), words that are not options
/// (Slurm stops reading options at the first such word, so it would take the engine's own
/// words after it for the script or command), an option at the end that still wants its value
/// (it would take the engine's next word), and the options the engine sets itself in any form
/// Slurm accepts: `--output=x`, `--output x`, `-ox`, `-o x`, `-vox` (a cluster of short
/// options), `--outp=x` (an unambiguous prefix of a long option, as getopt_long takes it).
pub fn check_words(words: &[String]) -> Result<()> {
    for w in words {
        if w.chars().any(|c| c == '\n' || c == '\0') {
            return Err(Error::invalid(
                "a Slurm argument must not hold a newline or NUL; give each on one line",
            ));
        }
    }
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        i += 1;
        let next = words.get(i);
        if w == "--" || w == "-" || !w.starts_with('-') {
            return Err(not_an_option(w));
        }
        if let Some(body) = w.strip_prefix("--") {
            let (name, attached) = match body.split_once('=') {
                Some((name, _)) => (name, true),
                None => (body, false),
            };
            match long_option(name) {
                Long::Reserved(full) => return Err(reserved(w, full)),
                Long::Known(Arg::Required) if !attached => {
                    if next.is_none() {
                        return Err(wants_value(w));
                    }
                    i += 1;
                }
                Long::Known(_) => {}
                // Not an option of Slurm's we know (a newer one, a site's plugin), or an
                // ambiguous prefix (Slurm refuses it): a following word that does not look like
                // an option is taken for its value; one that does is checked as an option.
                Long::Unknown => {
                    if !attached && next.is_some_and(|n| !n.starts_with('-')) {
                        i += 1;
                    }
                }
            }
            continue;
        }
        // A cluster of short options: each letter an option until one that takes a value,
        // whose value is the rest of the word (or, for a required value, the next word).
        for (at, c) in w.char_indices().skip(1) {
            let Some(o) = OPTIONS.iter().find(|o| o.short == Some(c)) else {
                continue;
            };
            if RESERVED.contains(&o.long) {
                return Err(reserved(w, o.long));
            }
            match o.arg {
                Arg::No => continue,
                Arg::Optional => break,
                Arg::Required => {
                    if at + c.len_utf8() == w.len() {
                        if next.is_none() {
                            return Err(wants_value(w));
                        }
                        i += 1;
                    }
                    break;
                }
            }
        }
    }
    Ok(())
}

/// What a `--name` word stands for, by getopt_long's rules: the option of that exact name,
/// else the one option whose name it begins (an abbreviation).
enum Long {
    Reserved(&'static str),
    Known(Arg),
    Unknown,
}

fn long_option(name: &str) -> Long {
    if let Some(o) = OPTIONS.iter().find(|o| o.long == name) {
        return if RESERVED.contains(&o.long) {
            Long::Reserved(o.long)
        } else {
            Long::Known(o.arg)
        };
    }
    if name.is_empty() {
        return Long::Unknown;
    }
    // Any reserved option the prefix could stand for is refused, unique or not (an ambiguous
    // prefix is Slurm's error anyway, and a Slurm without the other candidate takes it).
    if let Some(r) = RESERVED.iter().find(|r| r.starts_with(name)) {
        return Long::Reserved(r);
    }
    let mut matches = OPTIONS.iter().filter(|o| o.long.starts_with(name));
    match (matches.next(), matches.next()) {
        (Some(o), None) => Long::Known(o.arg),
        _ => Long::Unknown,
    }
}

fn reserved(word: &str, long: &str) -> Error {
    Error::invalid(format!(
        "the Slurm argument {word:?} is (or abbreviates) --{long}, which remote-runner sets itself (job name, \
         output files, working directory, the wait bound); leave it out of the Slurm arguments"
    ))
}

fn not_an_option(word: &str) -> Error {
    Error::invalid(format!(
        "the Slurm argument {word:?} is not an option or the value of one: Slurm stops reading \
         options there and takes the rest for the job's script or command; give options only \
         (--name=value), and quote a value with spaces"
    ))
}

fn wants_value(word: &str) -> Error {
    Error::invalid(format!(
        "the Slurm option {word:?} ends the Slurm arguments without its value; give the value \
         with it (--name=VALUE or -xVALUE)"
    ))
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
            split_args(
                " --partition=gpu  --time=60 --comment 'two words' -A\"a b\" --comment x\\ y"
            )
            .unwrap(),
            vec![
                "--partition=gpu",
                "--time=60",
                "--comment",
                "two words",
                "-Aa b",
                "--comment",
                "x y"
            ]
        );
        assert_eq!(split_args("").unwrap(), Vec::<String>::new());
        // An empty word is not an option: Slurm would take it for the script or command.
        assert!(split_args("''").is_err());
    }

    #[test]
    fn refuses_unbalanced_quotes_and_reserved_options() {
        assert!(split_args("--comment 'x").is_err());
        assert!(split_args("--no-shell").is_err());
        assert!(split_args("--job-name=x").is_err());
        assert!(split_args("--output=/tmp/x").is_err());
    }

    fn refused(text: &str) -> String {
        match split_args(text) {
            Ok(words) => panic!("{text:?} was taken: {words:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn refuses_reserved_options_in_every_form_slurm_accepts() {
        for text in [
            // long, with the value attached or as the next word
            "--output=/tmp/x",
            "--output /tmp/x",
            "--chdir=/",
            "--job-name x",
            "--wrap=true",
            // short, with the value attached or as the next word
            "-o/tmp/x",
            "-o /tmp/x",
            "-D/",
            "-Jx",
            "-e/tmp/e",
            "-I",
            "-I5",
            // in a cluster of short options that take no value
            "-vo/tmp/x",
            "-HQD/",
            "-vvJx",
            // abbreviated long options (getopt_long takes an unambiguous prefix)
            "--outp=/tmp/x",
            "--outp /tmp/x",
            "--chd=/",
            "--job=x",
            "--job-n=x",
            "--no-sh",
            "--no-s",
            "--pars",
            "--wra=true",
            "--imm=5",
            "--err=/tmp/e",
            // after other options and their values
            "--time=5 --comment c -o/tmp/x",
            "--time 5 -p debug --outp=/x",
        ] {
            let e = refused(text);
            assert!(e.contains("sets itself"), "{text:?}: {e}");
        }
        // The reserved option named in the error is the one the word stands for.
        assert!(refused("--outp=/tmp/x").contains("--output"));
        assert!(refused("-vJx").contains("--job-name"));
    }

    #[test]
    fn refuses_words_that_end_slurms_options() {
        for text in [
            "job.sh",
            "--time=5 extra",
            "--",
            "-- --time=5",
            "-",
            "--hold x",
        ] {
            let e = refused(text);
            assert!(e.contains("not an option"), "{text:?}: {e}");
        }
        // An option wanting a value at the very end would take the engine's next word.
        for text in ["--comment", "--time=5 -p", "--gres"] {
            let e = refused(text);
            assert!(e.contains("without its value"), "{text:?}: {e}");
        }
    }

    #[test]
    fn takes_values_that_look_reserved_and_other_options() {
        for text in [
            "--partition=gpu --time=60 --gres gpu:1",
            // a value of a short option is not read as options
            "-Aoutput",
            "-A -o",
            "-pJ",
            "-t 60 -N1 -n 2",
            "--comment --output=x",
            "--comment -Jx",
            // exact long names win over longer ones they begin
            "--mem=1G --mem-per-cpu=1G --nodes=1 --hold",
            // abbreviations of options that are not reserved
            "--part=gpu --tim=5 --comm x",
            // optional values only when attached
            "--exclusive --exclusive=user -k --no-kill=off",
            // an option Slurm may know and this table does not: its value stays a value
            "--site-plugin-opt value --time=5",
        ] {
            assert!(split_args(text).is_ok(), "{text:?}: {:?}", split_args(text));
        }
    }
}
