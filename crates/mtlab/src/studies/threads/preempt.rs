//! The kernel's preemption model, switched at run time where the kernel
//! allows it (PREEMPT_DYNAMIC with debugfs writable: `/sys/kernel/debug/sched/preempt`
//! reads `none voluntary (full)`; writing a name switches). The model found at
//! the start is written back when the switch is dropped.

use std::path::PathBuf;

pub const MODELS: [&str; 3] = ["none", "voluntary", "full"];

/// The live model and its file, when the kernel lets it be switched.
#[derive(Debug)]
pub struct Switch {
    file: PathBuf,
    original: String,
    current: String,
}

/// Why a sweep of preemption models cannot run here.
pub fn unavailable_reason(file: &std::path::Path) -> String {
    match std::fs::read_to_string(file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => format!(
            "{} does not exist: the kernel is not PREEMPT_DYNAMIC or debugfs is not mounted (mount -t debugfs none /sys/kernel/debug)",
            file.display()
        ),
        Err(e) => format!("{} cannot be read: {e} (kernel lockdown or not root)", file.display()),
        Ok(_) => format!("{} cannot be written (kernel lockdown or not root)", file.display()),
    }
}

impl Switch {
    /// The switch, if the live model can be read and written back unchanged.
    pub fn open() -> Result<Switch, String> {
        Switch::open_at(PathBuf::from(crate::study::env::PREEMPT_FILE))
    }

    fn open_at(file: PathBuf) -> Result<Switch, String> {
        let text = std::fs::read_to_string(&file).map_err(|_| unavailable_reason(&file))?;
        let original = live_model(&text).ok_or_else(|| format!("{}: unexpected contents `{}`", file.display(), text.trim()))?;
        std::fs::write(&file, &original).map_err(|_| unavailable_reason(&file))?;
        Ok(Switch { file, current: original.clone(), original })
    }

    pub fn current(&self) -> &str {
        &self.current
    }

    /// Switches to `model` unless it is already live.
    pub fn set(&mut self, model: &str) -> Result<(), crate::studies::StudyError> {
        if self.current != model {
            std::fs::write(&self.file, model).map_err(|source| crate::studies::StudyError::Io { path: self.file.clone(), source })?;
            self.current = model.to_string();
        }
        Ok(())
    }
}

impl Drop for Switch {
    fn drop(&mut self) {
        if self.current != self.original {
            if let Err(e) = std::fs::write(&self.file, &self.original) {
                say!("mtlab: could not restore the preemption model `{}` in {}: {e}", self.original, self.file.display());
            }
        }
    }
}

/// The parenthesised word of `none voluntary (full)`.
fn live_model(text: &str) -> Option<String> {
    text.split_whitespace().find(|w| w.starts_with('(')).map(|w| w.trim_matches(|c| c == '(' || c == ')').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_live_model_is_the_bracketed_one() {
        assert_eq!(live_model("none voluntary (full)\n").as_deref(), Some("full"));
        assert_eq!(live_model("(none) voluntary full lazy").as_deref(), Some("none"));
        assert_eq!(live_model("garbage"), None);
    }

    #[test]
    fn a_switch_writes_and_restores_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("preempt");
        std::fs::write(&f, "none voluntary (full)\n").unwrap();
        {
            let mut s = Switch::open_at(f.clone()).unwrap();
            // The no-op write-back leaves a plain name in an ordinary file.
            assert_eq!(std::fs::read_to_string(&f).unwrap(), "full");
            s.set("none").unwrap();
            assert_eq!(std::fs::read_to_string(&f).unwrap(), "none");
            assert_eq!(s.current(), "none");
        }
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "full", "restored on drop");
    }

    #[test]
    fn a_missing_file_says_why() {
        let e = Switch::open_at("/nonexistent/preempt".into()).unwrap_err();
        assert!(e.contains("PREEMPT_DYNAMIC"), "{e}");
    }
}
