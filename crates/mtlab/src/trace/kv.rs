//! The `key=value` text of the file header, RUNINFO and STATS records.

/// Escapes a header / RUNINFO value: newline → `\n`, backslash → `\\`.
pub fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out
}

/// `key=value\n` text with escaped values.
pub fn kv_text<K: AsRef<str>, V: AsRef<str>>(pairs: impl IntoIterator<Item = (K, V)>) -> String {
    let mut s = String::new();
    for (k, v) in pairs {
        s.push_str(k.as_ref());
        s.push('=');
        s.push_str(&escape_value(v.as_ref()));
        s.push('\n');
    }
    s
}

/// Unescapes a header / RUNINFO value: `\n` → newline, `\\` → backslash.
pub(crate) fn unescape(v: &str) -> String {
    if !v.contains('\\') {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len());
    let mut it = v.chars().peekable();
    while let Some(c) = it.next() {
        if c == '\\' {
            match it.peek() {
                Some('n') => {
                    out.push('\n');
                    it.next();
                }
                Some('\\') => {
                    out.push('\\');
                    it.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Parses `key=value\n` text into pairs (values unescaped, lines without `=` ignored).
pub(crate) fn parse_kv_text(text: &str) -> Vec<(String, String)> {
    text.split('\n')
        .filter_map(|line| {
            let line = line.strip_suffix('\r').unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            Some((k.to_string(), unescape(v)))
        })
        .collect()
}
