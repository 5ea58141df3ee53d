//! The arguments of one command: flags and options in any order, `--opt value` or
//! `--opt=value`, each at most once (but for list options, which collect every value),
//! `--help`/`-h`, and `--` ending the options.
//!
//! Arguments stay `OsString`s until a command asks for a value as text, so a path or a command
//! line passes through byte for byte even when it is not UTF-8.

use std::ffi::{OsStr, OsString};

/// How a command takes its operands, the arguments that are not options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operands {
    /// None.
    None,
    /// Exactly one, called this in errors (`FILE`).
    One(&'static str),
    /// Any number.
    Any,
    /// A command line: at least one, and the first ends the options, so that the command's
    /// own options (`sh -c ...`) are not taken for ours.
    CommandLine,
}

/// What a command accepts, and how it presents itself in help and errors.
#[derive(Debug)]
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    /// The arguments after the name, as shown in usage lines.
    pub(crate) synopsis: &'static str,
    /// What the command does, one or more lines.
    pub(crate) about: &'static str,
    /// Options that take no value.
    pub(crate) flags: &'static [&'static str],
    /// Options that take a value, given at most once.
    pub(crate) options: &'static [&'static str],
    /// Options that take a value and may be given again, each time adding one.
    pub(crate) lists: &'static [&'static str],
    pub(crate) operands: Operands,
}

/// The outcome of parsing a command's arguments.
#[derive(Debug)]
pub(crate) enum Parsed {
    /// `--help` or `-h`: print [`Spec::help`].
    Help,
    Args(Args),
}

/// A command's arguments, checked against its [`Spec`].
#[derive(Debug)]
pub(crate) struct Args {
    spec: &'static Spec,
    flags: Vec<&'static str>,
    /// Options with their values, in the order given.
    values: Vec<(&'static str, OsString)>,
    operands: Vec<OsString>,
    /// Whether `--` ended the options.
    dash_dash: bool,
}

impl Spec {
    /// `usage: gpu-test-permit NAME SYNOPSIS`.
    pub(crate) fn usage(&self) -> String {
        format!("usage: gpu-test-permit {} {}", self.name, self.synopsis)
            .trim_end()
            .to_string()
    }

    /// The text `--help` prints.
    pub(crate) fn help(&self) -> String {
        format!("{}\n\n{}\n", self.usage(), self.about)
    }

    /// A usage error: the command, what is wrong, and the usage line.
    fn error(&self, problem: impl std::fmt::Display) -> String {
        format!("{}: {problem}\n{}", self.name, self.usage())
    }

    /// Parses `args`, the arguments after the command's name.
    ///
    /// # Errors
    ///
    /// An unknown option, an option given twice (which of the two was meant is a guess), a
    /// flag given a value, an option without one, or operands the command does not take: a
    /// message that names the command and ends with its usage line.
    pub(crate) fn parse(&'static self, args: &[OsString]) -> Result<Parsed, String> {
        let mut parsed = Args {
            spec: self,
            flags: Vec::new(),
            values: Vec::new(),
            operands: Vec::new(),
            dash_dash: false,
        };
        let mut options_ended = false;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let bytes = arg.as_encoded_bytes();
            if options_ended || bytes.len() < 2 || bytes[0] != b'-' {
                parsed.operands.push(arg.clone());
                options_ended |= self.operands == Operands::CommandLine;
                continue;
            }
            if bytes == b"--" {
                options_ended = true;
                parsed.dash_dash = true;
                continue;
            }
            let (name, inline) = split_option(arg);
            let name_text = name.to_string_lossy();
            if matches!(&*name_text, "--help" | "-h") && inline.is_none() {
                return Ok(Parsed::Help);
            }
            if let Some(flag) = self.flags.iter().find(|f| **f == name_text) {
                if inline.is_some() {
                    return Err(self.error(format_args!("option `{flag}` takes no value")));
                }
                if parsed.flags.contains(flag) {
                    return Err(
                        self.error(format_args!("option `{flag}` given twice; give it once"))
                    );
                }
                parsed.flags.push(flag);
            } else if let Some(option) = self
                .options
                .iter()
                .chain(self.lists)
                .find(|o| **o == name_text)
            {
                let value = match inline {
                    Some(v) => v,
                    None => it.next().cloned().ok_or_else(|| {
                        self.error(format_args!("option `{option}` needs a value"))
                    })?,
                };
                let once = !self.lists.contains(option);
                if let Some((_, first)) = parsed.values.iter().find(|(o, _)| once && o == option) {
                    return Err(self.error(format_args!(
                        "option `{option}` given twice (`{}`, then `{}`); give it once",
                        first.to_string_lossy(),
                        value.to_string_lossy()
                    )));
                }
                parsed.values.push((option, value));
            } else {
                return Err(self.error(format_args!("unknown option `{name_text}`")));
            }
        }
        let n = parsed.operands.len();
        let problem = match self.operands {
            Operands::None if n > 0 => Some(format!(
                "unexpected argument `{}`",
                parsed.operands[0].to_string_lossy()
            )),
            Operands::One(what) if n == 0 => Some(format!("no {what} given")),
            Operands::One(_) if n > 1 => Some(format!(
                "unexpected argument `{}`",
                parsed.operands[1].to_string_lossy()
            )),
            Operands::CommandLine if n == 0 => Some("no command given".to_string()),
            _ => None,
        };
        match problem {
            Some(p) => Err(self.error(p)),
            None => Ok(Parsed::Args(parsed)),
        }
    }
}

/// `--name=value` split at the first `=`, or `--name` and `None`.
fn split_option(arg: &OsStr) -> (OsString, Option<OsString>) {
    let bytes = arg.as_encoded_bytes();
    match bytes.iter().position(|b| *b == b'=') {
        // SAFETY: both halves come from `as_encoded_bytes` of one `OsStr`, split right before
        // and right after `=`, a non-empty UTF-8 substring, as the function requires.
        Some(i) => unsafe {
            (
                OsStr::from_encoded_bytes_unchecked(&bytes[..i]).to_owned(),
                Some(OsStr::from_encoded_bytes_unchecked(&bytes[i + 1..]).to_owned()),
            )
        },
        None => (arg.to_owned(), None),
    }
}

impl Args {
    /// Whether `--` ended the options (`ci` asks for it before the command).
    pub(crate) fn dash_dash(&self) -> bool {
        self.dash_dash
    }

    /// Whether the flag `name` was given.
    pub(crate) fn flag(&self, name: &str) -> bool {
        self.flags.contains(&name)
    }

    /// Every value of list option `name`, in the order given.
    pub(crate) fn values(&self, name: &str) -> Vec<&OsStr> {
        self.values
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.as_os_str())
            .collect()
    }

    /// The value of option `name` (an option is given at most once).
    pub(crate) fn value(&self, name: &str) -> Option<&OsStr> {
        self.values
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_os_str())
    }

    /// The value of option `name` parsed by `parse`; an error names the command, the option
    /// and the value.
    pub(crate) fn parsed_value<T, E: std::fmt::Display>(
        &self,
        name: &str,
        parse: impl FnOnce(&OsStr) -> Result<T, E>,
    ) -> Result<Option<T>, String> {
        self.value(name)
            .map(|v| {
                parse(v).map_err(|e| {
                    format!("{}: {name} '{}' {e}", self.spec.name, v.to_string_lossy())
                })
            })
            .transpose()
    }

    /// The operands, byte for byte.
    /// The slot directory a command reads: `--dir DIR`, else the one the environment names.
    pub(crate) fn slot_dir(&self) -> Result<std::path::PathBuf, String> {
        match self.value("--dir") {
            Some(dir) => Ok(std::path::PathBuf::from(dir)),
            None => gpu_test_permit::config::Config::global().slot_dir_path(),
        }
    }

    pub(crate) fn operands(&self) -> &[OsString] {
        &self.operands
    }

    /// The operands as text; an error names the command and the operand that is not UTF-8.
    pub(crate) fn operands_utf8(&self) -> Result<Vec<&str>, String> {
        self.operands
            .iter()
            .map(|a| {
                a.to_str().ok_or_else(|| {
                    format!(
                        "{}: argument '{}' is not valid UTF-8",
                        self.spec.name,
                        a.to_string_lossy()
                    )
                })
            })
            .collect()
    }

    /// An error about these arguments, naming the command.
    pub(crate) fn error(&self, problem: impl std::fmt::Display) -> String {
        format!("{}: {problem}", self.spec.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static SPEC: Spec = Spec {
        name: "demo",
        synopsis: "[--on] [--n N] FILE",
        about: "a demo",
        flags: &["--on"],
        options: &["--n"],
        lists: &["--l"],
        operands: Operands::One("FILE"),
    };

    static RUN: Spec = Spec {
        name: "run",
        synopsis: "[--on] [--] COMMAND [ARGS...]",
        about: "runs",
        flags: &["--on"],
        options: &[],
        lists: &[],
        operands: Operands::CommandLine,
    };

    fn parse(spec: &'static Spec, args: &[&str]) -> Result<Parsed, String> {
        let args: Vec<OsString> = args.iter().map(OsString::from).collect();
        spec.parse(&args)
    }

    fn args(spec: &'static Spec, args: &[&str]) -> Args {
        match parse(spec, args) {
            Ok(Parsed::Args(a)) => a,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn options_in_any_order_with_or_without_equals() {
        for order in [
            &["--on", "--n", "3", "f"][..],
            &["f", "--n=3", "--on"],
            &["--n", "3", "f", "--on"],
        ] {
            let a = args(&SPEC, order);
            assert!(a.flag("--on"), "{order:?}");
            assert_eq!(a.value("--n"), Some(OsStr::new("3")), "{order:?}");
            assert_eq!(a.operands(), [OsString::from("f")], "{order:?}");
        }
        assert_eq!(
            args(&SPEC, &["--n=", "f"]).value("--n"),
            Some(OsStr::new(""))
        );
    }

    #[test]
    fn a_list_option_collects_every_value() {
        let a = args(&SPEC, &["--l", "x", "f", "--l=y", "--n", "1"]);
        assert_eq!(a.values("--l"), [OsStr::new("x"), OsStr::new("y")]);
        assert_eq!(args(&SPEC, &["f"]).values("--l"), Vec::<&OsStr>::new());
    }

    #[test]
    fn help_and_double_dash() {
        assert!(matches!(parse(&SPEC, &["-h"]), Ok(Parsed::Help)));
        assert!(matches!(parse(&SPEC, &["f", "--help"]), Ok(Parsed::Help)));
        let a = args(&SPEC, &["--", "--help"]);
        assert_eq!(a.operands(), [OsString::from("--help")]);
        // `-` alone is an operand (standard input, by convention).
        assert_eq!(args(&SPEC, &["-"]).operands(), [OsString::from("-")]);
    }

    #[test]
    fn a_command_line_ends_the_options() {
        let a = args(&RUN, &["--on", "sh", "-c", "--on", "--help"]);
        assert!(a.flag("--on"));
        assert_eq!(
            a.operands(),
            ["sh", "-c", "--on", "--help"].map(OsString::from)
        );
        let a = args(&RUN, &["--", "--on"]);
        assert!(!a.flag("--on"));
        assert_eq!(a.operands(), [OsString::from("--on")]);
    }

    #[test]
    fn errors_name_the_command_and_the_problem() {
        for (given, says) in [
            (&["--bogus", "f"][..], "demo: unknown option `--bogus`"),
            (&["--bogus=1", "f"], "demo: unknown option `--bogus`"),
            (&["-x", "f"], "demo: unknown option `-x`"),
            (&["f", "--n"], "demo: option `--n` needs a value"),
            (&["f", "--on=1"], "demo: option `--on` takes no value"),
            (
                &["--n", "1", "--n=2", "f"],
                "demo: option `--n` given twice (`1`, then `2`); give it once",
            ),
            (
                &["--on", "f", "--on"],
                "demo: option `--on` given twice; give it once",
            ),
            (&[], "demo: no FILE given"),
            (&["f", "g"], "demo: unexpected argument `g`"),
        ] {
            let err = parse(&SPEC, given).unwrap_err();
            assert_eq!(
                err,
                format!("{says}\nusage: gpu-test-permit demo [--on] [--n N] FILE"),
                "{given:?}"
            );
        }
        assert!(
            parse(&RUN, &["--on"])
                .unwrap_err()
                .starts_with("run: no command given\n")
        );
    }

    #[test]
    fn values_are_parsed_on_request() {
        let a = args(&SPEC, &["--n", "x", "f"]);
        let err = a
            .parsed_value("--n", |v| v.to_str().unwrap().parse::<u8>())
            .unwrap_err();
        assert_eq!(err, "demo: --n 'x' invalid digit found in string");
        assert_eq!(
            args(&SPEC, &["f"]).parsed_value("--n", |_| Ok::<_, String>(1)),
            Ok(None)
        );
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_bytes_pass_through() {
        use std::os::unix::ffi::{OsStrExt, OsStringExt};
        let bad = OsString::from_vec(b"a\xffb".to_vec());
        let mut eq = OsString::from("--n=");
        eq.push(&bad);
        let parsed = SPEC.parse(&[eq, bad.clone()]).unwrap();
        let Parsed::Args(a) = parsed else { panic!() };
        assert_eq!(a.value("--n").unwrap().as_bytes(), b"a\xffb");
        assert_eq!(a.operands(), std::slice::from_ref(&bad));
        let err = a.operands_utf8().unwrap_err();
        assert_eq!(err, "demo: argument 'a\u{fffd}b' is not valid UTF-8");
        let mut opt = OsString::from("--");
        opt.push(&bad);
        let err = SPEC.parse(&[opt]).unwrap_err();
        assert!(
            err.starts_with("demo: unknown option `--a\u{fffd}b`"),
            "{err}"
        );
    }
}
