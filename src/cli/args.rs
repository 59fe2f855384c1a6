//! A small command-line parser with llama.cpp's conventions: long flags
//! (`--ctx-size 4096` or `--ctx-size=4096`), short flags that may be several
//! letters (`-c`, `-ub`, `-np`), and positional arguments. A flag table per
//! command lists every spelling, so `--help` and error messages come from one
//! place. (clap cannot express multi-letter short flags such as `-ub`.)

use std::collections::HashMap;

/// One flag of a command.
#[derive(Clone, Copy)]
pub struct Flag {
    /// Canonical name (the long form without dashes), the key in [`Parsed`].
    pub name: &'static str,
    /// Other spellings, with their dashes (`-m`, `-ub`, `--grp-attn-n`).
    pub aliases: &'static [&'static str],
    /// Value placeholder for `--help` (`N`, `FILE`); `None` = boolean switch.
    pub value: Option<&'static str>,
    /// One line of help.
    pub help: &'static str,
}

/// One row of a command's flag table:
/// `flag!("ctx-size", ["-c"], Some("N"), "context size")`.
macro_rules! flag {
    ($name:literal, [$($a:literal),*], $v:expr, $help:literal) => {
        $crate::cli::args::Flag { name: $name, aliases: &[$($a),*], value: $v, help: $help }
    };
}
pub(crate) use flag;

/// Parsed flags and positionals.
#[derive(Default, Debug)]
pub struct Parsed {
    values: HashMap<&'static str, Vec<String>>,
    /// Arguments that are not flags, in order.
    pub positional: Vec<String>,
}

impl Parsed {
    /// Whether a switch or a flag was given.
    pub fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    /// The last value given for `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values
            .get(name)
            .and_then(|v| v.last())
            .map(String::as_str)
    }
    /// Every value given for a repeatable flag.
    pub fn all(&self, name: &str) -> &[String] {
        self.values.get(name).map(Vec::as_slice).unwrap_or(&[])
    }
    /// The value of `name` parsed as `T`, with an error naming the flag.
    pub fn parse<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String> {
        match self.get(name) {
            None => Ok(None),
            Some(s) => s
                .parse::<T>()
                .map(Some)
                .map_err(|_| format!("--{name}: cannot parse `{s}`")),
        }
    }
}

/// Parse `args` against `flags`. Unknown flags are errors naming them.
pub fn parse(args: &[String], flags: &[Flag]) -> Result<Parsed, String> {
    let find = |spelling: &str| -> Option<&Flag> {
        flags
            .iter()
            .find(|f| spelling.strip_prefix("--") == Some(f.name) || f.aliases.contains(&spelling))
    };
    let mut out = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            out.positional.extend(args[i..].iter().cloned());
            break;
        }
        // A lone "-" or a negative number is a positional value, not a flag.
        if !a.starts_with('-') || a == "-" || a.parse::<f64>().is_ok() {
            out.positional.push(a.clone());
            continue;
        }
        let (spelling, inline) = match a.split_once('=') {
            Some((k, v)) if k.starts_with("--") => (k, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let flag = find(spelling).ok_or_else(|| format!("unknown flag `{spelling}`"))?;
        let value = match (flag.value, inline) {
            (None, None) => String::new(),
            (None, Some(_)) => return Err(format!("`{spelling}` takes no value")),
            (Some(_), Some(v)) => v,
            (Some(meta), None) => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("`{spelling}` needs a value ({meta})"))?;
                i += 1;
                v.clone()
            }
        };
        out.values.entry(flag.name).or_default().push(value);
    }
    Ok(out)
}

/// `--help` text for a command's flags.
pub fn help(usage: &str, flags: &[Flag]) -> String {
    let mut s = format!("usage: {usage}\n\noptions:\n");
    for f in flags {
        let mut spell: Vec<String> = f.aliases.iter().map(|a| a.to_string()).collect();
        spell.push(format!("--{}", f.name));
        let left = match f.value {
            Some(v) => format!("{} {v}", spell.join(", ")),
            None => spell.join(", "),
        };
        s.push_str(&format!("  {left:<34} {}\n", f.help));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLAGS: &[Flag] = &[
        Flag {
            name: "ubatch-size",
            aliases: &["-ub"],
            value: Some("N"),
            help: "",
        },
        Flag {
            name: "model",
            aliases: &["-m"],
            value: Some("FILE"),
            help: "",
        },
        Flag {
            name: "json",
            aliases: &[],
            value: None,
            help: "",
        },
    ];

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn spellings_values_and_positionals() {
        let p = parse(
            &v(&["-ub", "64", "x.gguf", "--model=a", "-m", "b", "--json"]),
            FLAGS,
        )
        .expect("parses");
        assert_eq!(p.parse::<u32>("ubatch-size").unwrap(), Some(64));
        assert_eq!(p.get("model"), Some("b"));
        assert_eq!(p.all("model"), ["a", "b"]);
        assert!(p.has("json"));
        assert_eq!(p.positional, ["x.gguf"]);
    }

    #[test]
    fn errors_name_the_flag() {
        assert_eq!(
            parse(&v(&["--nope"]), FLAGS).unwrap_err(),
            "unknown flag `--nope`"
        );
        assert!(parse(&v(&["-m"]), FLAGS)
            .unwrap_err()
            .contains("`-m` needs a value"));
        assert!(parse(&v(&["--json=1"]), FLAGS)
            .unwrap_err()
            .contains("takes no value"));
        let p = parse(&v(&["-ub", "x"]), FLAGS).unwrap();
        assert!(p
            .parse::<u32>("ubatch-size")
            .unwrap_err()
            .contains("cannot parse `x`"));
    }

    #[test]
    fn negative_numbers_are_values() {
        let p = parse(&v(&["-m", "-1"]), FLAGS).unwrap();
        assert_eq!(p.get("model"), Some("-1"));
    }
}
