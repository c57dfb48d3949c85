//! The run channel's JSON on the host: values stay text (never re-encoded through `f64` or a
//! Rust `String`, so `-0`, integers of any size and lone surrogates in `\u` escapes all pass
//! exactly), checked for shape and depth without recursion.

use serde::Deserialize;
use serde_json::value::RawValue;

/// The deepest nesting a value may have in either direction (completion values, binding
/// arguments and resolutions). Deeper values are refused with the path to the first level too
/// deep, never cut or dropped silently.
pub const MAX_DEPTH: usize = 512;

/// The failure kinds of the seam, and nothing else.
pub const KINDS: [&str; 6] = [
    "exception",
    "timeout",
    "abort",
    "worker-exit",
    "invalid-output",
    "output-limit",
];

/// A line the runner wrote on its channel.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunnerLine<'a> {
    pub t: &'a str,
    #[serde(default)]
    pub id: Option<u64>,
    #[serde(default)]
    pub global: Option<String>,
    #[serde(default)]
    pub function: Option<String>,
    #[serde(default, borrow)]
    pub args: Option<&'a RawValue>,
    #[serde(default, borrow)]
    pub result: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Outcome<'a> {
    #[serde(borrow)]
    logs: Vec<&'a RawValue>,
    #[serde(default, borrow)]
    value: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<Failure<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Failure<'a> {
    kind: &'a str,
    #[serde(borrow)]
    message: &'a RawValue,
}

/// What a checked result holds.
pub(super) struct Checked {
    pub error_kind: Option<String>,
    /// Bytes of the serialized logs array.
    pub logs_bytes: usize,
    /// Bytes of the value, or of the failure message as a JSON string.
    pub payload_bytes: usize,
    /// The serialized logs array.
    pub logs: String,
}

/// Check that `text` is a `CodeRunResult` of the seam's shape: `logs` an array of strings,
/// `value` lossless JSON no deeper than [`MAX_DEPTH`], `error` one of the six kinds with a
/// string message, not both a value and an error, nothing else.
pub(super) fn check_result(text: &str) -> Result<Checked, String> {
    let o: Outcome = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if let Some(bad) = o.logs.iter().position(|l| !l.get().starts_with('"')) {
        return Err(format!("logs[{bad}] is not a string"));
    }
    let logs = format!(
        "[{}]",
        o.logs.iter().map(|l| l.get()).collect::<Vec<_>>().join(",")
    );
    let mut payload_bytes = 0;
    if let Some(v) = o.value {
        if v.get() == "null" && o.error.is_some() {
            // `"value": null` next to an error is not a value.
        } else {
            depth_path(v.get(), MAX_DEPTH).map_err(|p| format!("the value{p} is too deep"))?;
            payload_bytes = v.get().len();
        }
    }
    let error_kind = match &o.error {
        None => None,
        Some(f) => {
            if !KINDS.contains(&f.kind) {
                return Err(format!(
                    "error.kind {:?} is not one of the six kinds",
                    f.kind
                ));
            }
            if !f.message.get().starts_with('"') {
                return Err("error.message is not a string".into());
            }
            if payload_bytes > 0 {
                return Err("it holds both a value and an error".into());
            }
            payload_bytes = f.message.get().len();
            Some(f.kind.to_string())
        }
    };
    Ok(Checked {
        error_kind,
        logs_bytes: logs.len(),
        payload_bytes,
        logs,
    })
}

/// One open container while scanning: is it an object, its current index, where its current
/// key's text is.
type Open = (bool, usize, Option<(usize, usize)>);

/// What [`scan`] stops at: a container about to open, or a number's text.
enum Token<'a> {
    Open,
    Number(&'a str),
}

/// Walks the JSON text `text` once, iteratively (any depth is safe to look at), calling `at`
/// with the containers open so far before each container opens and at each number; the first
/// `Some` it returns ends the walk. Assumes `text` is valid JSON.
fn scan<T>(text: &str, mut at: impl FnMut(&[Open], Token<'_>) -> Option<T>) -> Option<T> {
    let b = text.as_bytes();
    let mut stack: Vec<Open> = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                // A key: the string right before a ':'.
                let mut j = i + 1;
                while j < b.len() && matches!(b[j], b' ' | b'\t' | b'\n' | b'\r') {
                    j += 1;
                }
                if b.get(j) == Some(&b':')
                    && let Some(top) = stack.last_mut()
                {
                    top.2 = Some((start, i + 1));
                }
            }
            b'[' | b'{' => {
                if let Some(found) = at(&stack, Token::Open) {
                    return Some(found);
                }
                stack.push((b[i] == b'{', 0, None));
            }
            b']' | b'}' => {
                stack.pop();
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.1 += 1;
                }
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < b.len()
                    && matches!(b[i + 1], b'0'..=b'9' | b'-' | b'+' | b'.' | b'e' | b'E')
                {
                    i += 1;
                }
                if let Some(found) = at(&stack, Token::Number(&text[start..=i])) {
                    return Some(found);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// `Ok` when the JSON text `text` nests at most `max` levels; otherwise the path to the first
/// container that is one level too deep (`[0]["a"][3]`...). Iterative: any depth is safe to
/// look at. Assumes `text` is valid JSON.
pub fn depth_path(text: &str, max: usize) -> Result<(), String> {
    match scan(text, |stack, token| {
        (matches!(token, Token::Open) && stack.len() >= max).then(|| path_of(text, stack))
    }) {
        None => Ok(()),
        Some(path) => Err(format!(
            "{path} (nested deeper than {max} levels, the most the runtime carries)"
        )),
    }
}

/// The path to and text of the first number in the JSON text `text` that the runner's language
/// cannot hold exactly: beyond a double's range in either language (it would arrive as an
/// infinity), and in JavaScript an integer a double does not hold exactly (it would arrive
/// rounded). Decimal fractions are a double's own meaning in JSON and pass. Iterative; assumes
/// `text` is valid JSON.
pub fn lossy_number(text: &str, javascript: bool) -> Option<(String, String)> {
    scan(text, |stack, token| {
        let Token::Number(token) = token else {
            return None;
        };
        let f: f64 = token.parse().unwrap_or(f64::INFINITY);
        let integer = !token.contains(['.', 'e', 'E']);
        let lossy = !f.is_finite() || (javascript && integer && format!("{f:.0}") != token);
        lossy.then(|| (path_of(text, stack), token.to_string()))
    })
}

/// The path (`[0]["a"][3]`...) to where a scan with open containers `stack` stands.
fn path_of(text: &str, stack: &[Open]) -> String {
    let mut path = String::new();
    for (is_obj, index, key) in stack {
        match (is_obj, key) {
            (true, Some((s, e))) => {
                path.push('[');
                path.push_str(&text[*s..*e]);
                path.push(']');
            }
            _ => path.push_str(&format!("[{index}]")),
        }
    }
    path
}

/// The value of the top-level `"key"` member of a JSON object text, as its exact source text
/// (so numbers keep every digit and `-0` its sign). `None` when absent or not an object.
pub fn raw_member<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let map: std::collections::HashMap<String, &RawValue> = serde_json::from_str(text).ok()?;
    map.get(key).map(|v| v.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_member_keeps_source_text() {
        let t = r#"{"type":"resolve","value":{"a":[1,-0,123456789012345678901234567890,"x\"}\ud800"]},"z":1}"#;
        assert_eq!(
            raw_member(t, "value"),
            Some(r#"{"a":[1,-0,123456789012345678901234567890,"x\"}\ud800"]}"#)
        );
        assert_eq!(raw_member(t, "z"), Some("1"));
        assert_eq!(raw_member(t, "missing"), None);
    }

    #[test]
    fn depth_is_checked_without_recursion() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let e = depth_path(&deep, MAX_DEPTH).unwrap_err();
        assert!(e.starts_with("[0][0]"), "{e}");
        assert!(depth_path(&format!("{}{}", "[".repeat(512), "]".repeat(512)), 512).is_ok());
        let e = depth_path(r#"{"a":[1,{"b\"":[[]]}]}"#, 3).unwrap_err();
        assert!(e.starts_with(r#"["a"][1]["b\""]"#), "{e}");
    }

    #[test]
    fn numbers_a_language_cannot_hold_are_found() {
        let t = r#"{"a":[1,-0,0.1,1e22,9007199254740992,"9007199254740993"],"b":{"c":[2,9007199254740993]}}"#;
        assert_eq!(
            lossy_number(t, true),
            Some((
                r#"["b"]["c"][1]"#.to_string(),
                "9007199254740993".to_string()
            ))
        );
        assert_eq!(lossy_number(t, false), None);
        assert_eq!(
            lossy_number("[1,[1e400]]", false),
            Some(("[1][0]".to_string(), "1e400".to_string()))
        );
        assert_eq!(lossy_number("-1e-400", true), None);
    }

    #[test]
    fn results_of_another_shape_are_refused() {
        assert!(check_result(r#"{"logs":["a","\ud800"],"value":-0}"#).is_ok());
        for bad in [
            r#"{"logs":[1]}"#,
            r#"{"logs":[],"error":{"kind":"oops","message":"m"}}"#,
            r#"{"logs":[],"error":{"kind":"exception","message":3}}"#,
            r#"{"logs":[],"value":1,"error":{"kind":"exception","message":"m"}}"#,
            r#"{"logs":[],"extra":1}"#,
            r#"{"value":1}"#,
        ] {
            assert!(check_result(bad).is_err(), "{bad}");
        }
    }
}
