//! The list of child traces `mtlab record` keeps in the root trace's RUNINFO
//! (`keys::CHILD_TRACES`). Child processes write `ROOT.d/PID[.N]` (`ROOT.PID[.N]` beside the
//! root file before `ROOT.d`), and a child that made no traced call writes nothing, so a file
//! that is not there is not evidence of anything by itself; the list of what
//! was there when the run ended is.
//!
//! Value: entries separated by `/`, each `SUFFIX:COMMAND`, where SUFFIX is
//! the part of the file name after `ROOT.` (`PID` or `PID.N`) and COMMAND the
//! base name of the process's first argument (a base name holds no `/`; a
//! `:` in it is kept, as SUFFIX holds none). Empty: no child traces.

/// One child trace of the list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTrace {
    /// `PID` or `PID.N`: the file is `ROOT.SUFFIX`.
    pub suffix: String,
    pub pid: u32,
    /// Base name of the process's first argument (empty when unknown).
    pub command: String,
}

/// The RUNINFO value for `(suffix, command)` pairs.
pub fn encode(entries: &[(String, String)]) -> String {
    entries
        .iter()
        .map(|(suffix, command)| format!("{suffix}:{}", command.replace('/', "_")))
        .collect::<Vec<_>>()
        .join("/")
}

/// The entries of a RUNINFO value; entries that do not parse are left out
/// (a reader must not fail on a list it cannot use).
pub fn decode(value: &str) -> Vec<ListedTrace> {
    value
        .split('/')
        .filter_map(|entry| {
            let (suffix, command) = entry.split_once(':')?;
            let pid = suffix_pid(suffix)?;
            Some(ListedTrace { suffix: suffix.to_string(), pid, command: command.to_string() })
        })
        .collect()
}

/// The pid of a child trace's suffix (`PID` or `PID.N`), if it is one
/// (`platform::names` spells the family's names).
pub fn suffix_pid(suffix: &str) -> Option<u32> {
    let (pid, _) = crate::platform::names::parse_child_suffix(suffix)?;
    u32::try_from(pid).ok()
}

/// The base name of a command's first argument (or of its executable when
/// there are no arguments): what `--comm` matches and the index shows.
pub fn command_name(cmdline: &[String], exe: &str) -> String {
    let first = cmdline.first().map(String::as_str).filter(|s| !s.is_empty()).unwrap_or(exe);
    first.rsplit('/').next().unwrap_or(first).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_round_trips_and_bad_entries_are_left_out() {
        let entries = vec![("41".to_string(), "bash".to_string()), ("42.1".into(), "a:b".into()), ("43".into(), "x/y".into())];
        let v = encode(&entries);
        assert_eq!(v, "41:bash/42.1:a:b/43:x_y");
        let back = decode(&v);
        assert_eq!(back.len(), 3);
        assert_eq!(back[1], ListedTrace { suffix: "42.1".into(), pid: 42, command: "a:b".into() });
        assert!(decode("").is_empty());
        assert_eq!(decode("x:ls/7:ls/7.1.2:ls/8").len(), 1);
    }

    #[test]
    fn the_command_is_the_first_arguments_base_name() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(command_name(&args(&["/usr/lib/gcc/x86_64-linux-gnu/12/cc1", "-quiet"]), "/x/cc1"), "cc1");
        assert_eq!(command_name(&args(&["python3", "-c", "1"]), "/usr/bin/python3.11"), "python3");
        assert_eq!(command_name(&[], "/usr/bin/ls"), "ls");
    }
}
