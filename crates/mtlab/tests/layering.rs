//! The layers of docs/architecture.md ("Layers": which top-level module may
//! use which) held against the code: every `crate::X` path (and `super::X`
//! that reaches the crate root) outside tests and comments must be an edge
//! of that table, every module must be in it, and the table itself must have
//! no cycle. A new dependency is a decision: write it in the table first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The allowed edges, module -> modules it may use, read from the doc.
fn allowed(doc: &str) -> Result<BTreeMap<String, BTreeSet<String>>, String> {
    let start = doc.find("\n## Layers\n").ok_or("docs/architecture.md has no \"## Layers\" section")?;
    let mut table = BTreeMap::new();
    for line in doc[start..].lines().skip(1).skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells.len() < 2 || cells[0].starts_with("---") || cells[0] == "module" {
            continue;
        }
        let names = |cell: &str| -> BTreeSet<String> { cell.split('`').skip(1).step_by(2).map(str::to_string).collect() };
        let module = names(cells[0]).into_iter().next().ok_or_else(|| format!("a Layers row names no module: {line}"))?;
        if table.insert(module.clone(), names(cells[1])).is_some() {
            return Err(format!("module `{module}` has two rows in the Layers table"));
        }
    }
    if table.is_empty() {
        return Err("the Layers table of docs/architecture.md has no rows".into());
    }
    Ok(table)
}

/// `source` without comments, string and character literals, and without
/// its `#[cfg(test)]` items (tests may reach anywhere); with the names of
/// the modules it declares as test modules in files of their own
/// (`#[cfg(test)] mod tests;`).
fn code_of(source: &str) -> (String, Vec<String>) {
    let code = without_literals(source);
    let mut out = String::with_capacity(code.len());
    let mut test_files = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match (item.find(';'), item.find('{')) {
            (Some(semi), brace) if brace.is_none_or(|b| semi < b) => {
                let decl = item[..semi].split_whitespace().collect::<Vec<_>>();
                if let [.., "mod", name] = decl.as_slice() {
                    test_files.push(name.to_string());
                }
                semi + 1
            }
            (_, Some(brace)) => {
                let mut depth = 0;
                let mut end = item.len();
                for (k, c) in item[brace..].char_indices() {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    if depth == 0 {
                        end = brace + k + 1;
                        break;
                    }
                }
                end
            }
            _ => item.len(),
        };
        // Keep the lines counted: a violation names its line.
        out.extend(item[..end].chars().filter(|&c| c == '\n'));
        rest = &item[end..];
    }
    out.push_str(rest);
    (out, test_files)
}

/// `source` without comments, string and character literals (line breaks kept).
fn without_literals(source: &str) -> String {
    let b = source.as_bytes();
    let mut out = String::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            i += rest.find('\n').unwrap_or(rest.len());
        } else if rest.starts_with("/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if raw_string_at(rest) && !out.ends_with(|c: char| c.is_ascii_alphanumeric() && c != 'b' || c == '_') {
            let hashes = rest[1..].bytes().take_while(|&c| c == b'#').count();
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 1 + hashes + 1;
            let len = body + rest[body..].find(&close).map_or(rest.len() - body, |e| e + close.len());
            out.push('"');
            out.extend(rest[..len].chars().filter(|&c| c == '\n'));
            out.push('"');
            i += len;
        } else if b[i] == b'"' {
            i += 1;
            out.push('"');
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push('"');
        } else if b[i] == b'\'' && rest.get(1..2) == Some("\\") {
            // An escaped character literal ('\n', '\'', '\u{1f}').
            i += rest[3..].find('\'').map_or(rest.len(), |e| e + 4);
            out.push_str("' '");
        } else if b[i] == b'\'' && rest[1..].chars().nth(1) == Some('\'') {
            // A character literal ('x', '"'), not a lifetime.
            i += 2 + rest[1..].chars().next().map_or(0, char::len_utf8);
            out.push_str("' '");
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Does a raw string (`r"…"`, `r#"…"#`) start here (not a raw identifier `r#type`)?
fn raw_string_at(rest: &str) -> bool {
    rest.strip_prefix('r').is_some_and(|r| r.trim_start_matches('#').starts_with('"'))
}

/// The top-level modules `code` (of a file whose module path is `path`,
/// e.g. ["report", "load"]) names, each with the line it is named on.
fn uses(code: &str, path: &[String]) -> Vec<(String, usize)> {
    let ident = |s: &str| -> String { s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect() };
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        for (at, _) in line.match_indices("crate::") {
            if line[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
                continue;
            }
            let rest = &line[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                // crate::{a::X, b} — the first segment of each path at depth 1.
                let mut depth = 1;
                let mut start = true;
                for (k, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        ',' if depth == 1 => start = true,
                        c if start && depth == 1 && (c.is_ascii_alphabetic() || c == '_') => {
                            found.push((ident(&group[k..]), n + 1));
                            start = false;
                        }
                        _ => {}
                    }
                }
            } else {
                found.push((ident(rest), n + 1));
            }
        }
        // super:: chains that climb to the crate root.
        for (at, _) in line.match_indices("super::") {
            if line[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut rest = &line[at..];
            let mut up = 0;
            while let Some(r) = rest.strip_prefix("super::") {
                up += 1;
                rest = r;
            }
            if up == path.len() {
                found.push((ident(rest), n + 1));
            }
        }
    }
    found.retain(|(m, _)| !m.is_empty() && m != "self");
    found
}

/// Each top-level module of `src` with its files: (module, module path, file).
fn modules(src: &Path) -> Vec<(String, Vec<String>, PathBuf)> {
    fn walk(dir: &Path, path: &mut Vec<String>, top: &str, out: &mut Vec<(String, Vec<String>, PathBuf)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_stem().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                path.push(name);
                walk(&p, path, top, out);
                path.pop();
            } else if p.extension().is_some_and(|e| e == "rs") {
                let mut of = path.clone();
                if name != "mod" {
                    of.push(name);
                }
                out.push((top.to_string(), of, p));
            }
        }
    }
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(src).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for p in entries {
        let name = p.file_stem().unwrap().to_string_lossy().to_string();
        if p.is_dir() {
            walk(&p, &mut vec![name.clone()], &name, &mut out);
        } else if p.extension().is_some_and(|e| e == "rs") && name != "lib" && name != "main" {
            out.push((name.clone(), vec![name], p));
        }
    }
    out
}

/// A module of the table that can reach itself, if any: the cycle's path.
fn cycle(table: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        table: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let from = stack.iter().position(|s| s == m).unwrap_or(0);
                let mut c = stack[from..].to_vec();
                c.push(m.to_string());
                return Some(c);
            }
            _ => {}
        }
        state.insert(m.to_string(), 1);
        stack.push(m.to_string());
        for next in table.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, table, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    table.keys().find_map(|m| visit(m, table, &mut state, &mut Vec::new()))
}

/// Every way the code at `src` breaks the table (empty: none).
fn violations(src: &Path, table: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(c) = cycle(table) {
        out.push(format!("the Layers table has a cycle: {}", c.join(" -> ")));
    }
    let files = modules(src);
    let tops: BTreeSet<String> = files.iter().map(|(t, _, _)| t.clone()).collect();
    for t in &tops {
        if !table.contains_key(t) {
            out.push(format!("module `{t}` is not in the Layers table of docs/architecture.md: add its row (what it may use)"));
        }
    }
    for m in table.keys().filter(|m| !tops.contains(*m)) {
        out.push(format!("the Layers table names `{m}`, which is no module of src/: remove its row"));
    }
    let codes: Vec<(String, Vec<String>)> = files.iter().map(|(_, _, f)| code_of(&std::fs::read_to_string(f).unwrap())).collect();
    // Files of `#[cfg(test)] mod NAME;` declarations: NAME.rs or NAME/mod.rs beside the declaring file.
    let test_files: BTreeSet<PathBuf> = files
        .iter()
        .zip(&codes)
        .flat_map(|((_, _, f), (_, names))| {
            let dir = if f.ends_with("mod.rs") || f.ends_with("lib.rs") { f.parent().unwrap().to_path_buf() } else { f.with_extension("") };
            names.iter().flat_map(move |n| [dir.join(format!("{n}.rs")), dir.join(n).join("mod.rs")]).collect::<Vec<_>>()
        })
        .collect();
    for ((top, path, file), (code, _)) in files.iter().zip(&codes) {
        if test_files.contains(file) {
            continue;
        }
        for (used, line) in uses(code, path) {
            if used == *top || !tops.contains(&used) {
                continue;
            }
            if !table.get(top).is_some_and(|may| may.contains(&used)) {
                out.push(format!(
                    "{}:{line}: `{top}` uses `{used}`, which the Layers table of docs/architecture.md does not allow: \
                     take the dependency out, or (if it belongs) add it to `{top}`'s row",
                    file.display()
                ));
            }
        }
    }
    out
}

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_code_keeps_the_layers_of_the_architecture_doc() {
    let doc = std::fs::read_to_string(crate_dir().join("../../docs/architecture.md")).unwrap();
    let table = allowed(&doc).unwrap();
    let found = violations(&crate_dir().join("src"), &table);
    assert!(found.is_empty(), "{} layering violation(s):\n{}", found.len(), found.join("\n"));
}

#[test]
fn a_forbidden_edge_and_a_cycle_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir(src.join("trace")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub mod trace; pub mod report; pub mod units;").unwrap();
    std::fs::write(src.join("units.rs"), "pub fn f() {}").unwrap();
    std::fs::write(
        src.join("trace/mod.rs"),
        "use crate::units;\n// crate::report in a comment\nconst S: &str = \"crate::report\";\n\
         #[cfg(test)]\nmod tests { use crate::report; }",
    )
    .unwrap();
    std::fs::write(
        src.join("trace/decode.rs"),
        "fn f() { let c = '\"'; super::super::units::f(); }\n#[cfg(test)]\nfn t() { crate::report::g() }\n\
         #[cfg(test)]\nmod more;\nfn h() {}",
    )
    .unwrap();
    std::fs::create_dir(src.join("trace/decode")).unwrap();
    std::fs::write(src.join("trace/decode/more.rs"), "use crate::report;").unwrap();
    std::fs::write(src.join("report.rs"), "use crate::{trace::X, units};\nfn g() { super::trace::f() }").unwrap();
    let doc = "# x\n\n## Layers\n\n| module | may use |\n|---|---|\n| `units` | — |\n| `trace` | `units` |\n| `report` | `trace`, `units` |\n";
    let table = allowed(doc).unwrap();
    assert_eq!(violations(src, &table), Vec::<String>::new(), "comments, strings and tests are no edges");
    std::fs::remove_dir_all(src.join("trace/decode")).unwrap();
    // An edge the table does not allow is named, file and line.
    std::fs::write(src.join("trace/decode.rs"), "fn f() {\n    crate::report::g();\n}").unwrap();
    let found = violations(src, &table);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].contains("decode.rs:2: `trace` uses `report`"), "{}", found[0]);
    // ...and through super:: from the top of a module, and in a group.
    std::fs::write(src.join("trace/decode.rs"), "fn f() { super::super::report::g() }").unwrap();
    assert_eq!(violations(src, &table).len(), 1);
    std::fs::write(src.join("units.rs"), "use crate::{report, trace::X};").unwrap();
    assert_eq!(violations(src, &table).len(), 3, "{:?}", violations(src, &table));
    // Code after a test module is code.
    std::fs::write(src.join("units.rs"), "#[cfg(test)]\nmod tests {\n    fn t() { let _ = \"}\"; }\n}\n\nfn late() {\n    crate::report::g();\n}").unwrap();
    let found = violations(src, &table);
    assert!(found.iter().any(|v| v.contains("units.rs:7: `units` uses `report`")), "{found:?}");
    // A table that allows a cycle is refused, and a module missing from it is named.
    let cyclic = doc.replace("| `units` | — |", "| `units` | `report` |");
    assert!(violations(src, &allowed(&cyclic).unwrap())[0].contains("cycle: "));
    std::fs::write(src.join("store.rs"), "").unwrap();
    assert!(violations(src, &table).iter().any(|v| v.contains("`store` is not in the Layers table")));
}
