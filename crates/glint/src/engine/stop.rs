//! Stop strings, matched on the generated text across token boundaries.

/// Split the text that may be sent off `held`: everything before the first
/// stop string (then `true`: stop here), else everything but the longest
/// tail that could be the start of a stop string.
pub(super) fn split_stop(held: &mut String, stop: &[String]) -> (String, bool) {
    let first = stop.iter().filter_map(|s| held.find(s.as_str())).min();
    if let Some(at) = first {
        let out = held[..at].to_string();
        held.clear();
        return (out, true);
    }
    let hold = stop
        .iter()
        .map(|s| partial_suffix(held, s))
        .max()
        .unwrap_or(0);
    // `hold` bytes equal a stop string's first bytes, which start at a
    // character boundary, so `held.len() - hold` is one as well.
    let rest = held.split_off(held.len() - hold);
    (std::mem::replace(held, rest), false)
}

/// Length of the longest tail of `text` that is a proper prefix of `stop`.
fn partial_suffix(text: &str, stop: &str) -> usize {
    let (t, s) = (text.as_bytes(), stop.as_bytes());
    (1..s.len().min(t.len() + 1))
        .rev()
        .find(|&k| t[t.len() - k..] == s[..k])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_stop(pieces: &[&str], stop: &[&str]) -> (String, bool) {
        let stop: Vec<String> = stop.iter().map(|s| s.to_string()).collect();
        let mut held = String::new();
        let mut out = String::new();
        for p in pieces {
            held.push_str(p);
            let (o, stopped) = split_stop(&mut held, &stop);
            out.push_str(&o);
            if stopped {
                return (out, true);
            }
        }
        out.push_str(&held);
        (out, false)
    }

    #[test]
    fn stop_strings_match_across_pieces_and_are_not_emitted() {
        assert_eq!(
            run_stop(&["Hel", "lo, W", "orld"], &["o, Wo"]),
            ("Hell".into(), true)
        );
        assert_eq!(run_stop(&["ab", "c"], &["x"]), ("abc".into(), false));
        // The earliest match wins, whichever stop string it is.
        assert_eq!(
            run_stop(&["one two three"], &["three", "two"]),
            ("one ".into(), true)
        );
    }

    #[test]
    fn a_possible_stop_start_is_held_back_then_released() {
        let stop = vec!["END".to_string()];
        let mut held = "the E".to_string();
        assert_eq!(split_stop(&mut held, &stop), ("the ".into(), false));
        assert_eq!(held, "E");
        held.push('X');
        assert_eq!(split_stop(&mut held, &stop), ("EX".into(), false));
        assert_eq!(held, "");
    }

    #[test]
    fn partial_suffix_respects_character_boundaries() {
        assert_eq!(partial_suffix("aé", "éclair"), "é".len());
        assert_eq!(partial_suffix("abc", "abc"), 0);
        assert_eq!(partial_suffix("xab", "abc"), 2);
        assert_eq!(partial_suffix("", "abc"), 0);
    }
}
