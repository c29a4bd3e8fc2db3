//! How a measurement's values are kept: a JSON array that reads back bit
//! for bit (see [`values_to_json`]).

use std::fmt::Write as _;

/// The JSON array of a measurement's values, written by hand so that every
/// value reads back bit for bit: Rust prints the shortest decimal that
/// parses back to the same f64, and [`values_from_json`] parses with Rust's
/// correctly rounded parser (serde_json's default parser may be off by one
/// unit in the last place). JSON has no NaN or infinity, so those are
/// written as the strings `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub(super) fn values_to_json(values: &[f64]) -> String {
    let mut s = String::with_capacity(2 + values.len() * 20);
    s.push('[');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        if v.is_finite() {
            // `{:?}` always has a digit after any '.', and uses `e` for
            // exponents: valid JSON numbers.
            let _ = write!(s, "{v:?}");
        } else if v.is_nan() {
            s.push_str("\"NaN\"");
        } else if *v > 0.0 {
            s.push_str("\"Infinity\"");
        } else {
            s.push_str("\"-Infinity\"");
        }
    }
    s.push(']');
    s
}

/// Reads what [`values_to_json`] wrote (and any JSON array of plain numbers).
pub(super) fn values_from_json(text: &str) -> Result<Vec<f64>, String> {
    let inner = text
        .trim()
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or_else(|| format!("not a JSON array: {text:.40}"))?;
    if inner.trim().is_empty() {
        return Ok(Vec::new());
    }
    inner
        .split(',')
        .map(|token| match token.trim() {
            "\"NaN\"" | "null" => Ok(f64::NAN),
            "\"Infinity\"" => Ok(f64::INFINITY),
            "\"-Infinity\"" => Ok(f64::NEG_INFINITY),
            number => number.parse::<f64>().map_err(|_| format!("not a number: {number:.40}")),
        })
        .collect()
}
