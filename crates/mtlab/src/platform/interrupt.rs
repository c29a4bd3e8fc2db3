//! What to do before mtlab dies of SIGINT, SIGTERM or SIGHUP: one handler
//! for the whole process runs every action registered and not yet dropped,
//! newest first, then dies of the signal. A signal the process inherited as
//! ignored (`nohup`) stays ignored.
//!
//! One handler, not one per user: the affinity study puts network settings
//! back and a study removes its temporary traces; `mtlab demo` runs both in
//! one process, and two handlers racing to exit could leave settings changed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, Once};

type Action = Box<dyn FnMut() + Send>;

static ACTIONS: Mutex<Vec<(u64, Action)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
static HURRY: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether a signal came and the actions run (or ran): something started
/// after it (a child spawned just then) has to stop itself.
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Whether a second signal came while the actions run: an action that
/// waits (a measured child given time to finish) stops waiting and does
/// the quick thing instead (kills it). A user pressing Ctrl-C twice wants
/// mtlab gone now; the actions still run, so nothing is left behind.
pub fn hurry() -> bool {
    HURRY.load(Ordering::Relaxed)
}

/// A registered action; dropping it unregisters the action.
#[must_use = "the action is unregistered when this is dropped"]
pub struct OnInterrupt(u64);

impl Drop for OnInterrupt {
    fn drop(&mut self) {
        let mut actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
        actions.retain(|(id, _)| *id != self.0);
    }
}

/// Runs `action` if mtlab is interrupted while the returned guard lives.
/// Where signals cannot be caught (never on Linux), nothing runs.
pub fn on_interrupt(action: impl FnMut() + Send + 'static) -> OnInterrupt {
    install();
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    ACTIONS.lock().unwrap_or_else(|p| p.into_inner()).push((id, Box::new(action)));
    OnInterrupt(id)
}

/// Whether this process ignores `sig` (inherited from `nohup`, `trap '' HUP`,
/// a background job of a script): then mtlab must go on ignoring it.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one
    // into `old`, a zeroed struct it may fill.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

fn install() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let caught: Vec<libc::c_int> = [SIGINT, SIGTERM, SIGHUP].into_iter().filter(|&s| !ignored(s)).collect();
        if caught.is_empty() {
            return;
        }
        let Ok(mut signals) = signal_hook::iterator::Signals::new(&caught) else {
            return;
        };
        std::thread::spawn(move || {
            let first = signals.forever().next();
            if let Some(sig) = first {
                INTERRUPTED.store(true, Ordering::SeqCst);
                std::thread::spawn(move || {
                    if signals.forever().next().is_some() {
                        HURRY.store(true, Ordering::Relaxed);
                    }
                });
                // Held to the exit: an action dropped meanwhile by another
                // thread waits here rather than run half-done.
                let mut actions = ACTIONS.lock().unwrap_or_else(|p| p.into_inner());
                for (_, action) in actions.iter_mut().rev() {
                    action();
                }
                // Die of the signal itself, as a shell expects to stop a
                // script's loop on Ctrl-C (an exit status of 130 does not).
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dropped_action_is_unregistered() {
        let before = ACTIONS.lock().unwrap().len();
        let a = on_interrupt(|| {});
        let b = on_interrupt(|| {});
        assert_eq!(ACTIONS.lock().unwrap().len(), before + 2);
        drop(a);
        let ids: Vec<u64> = ACTIONS.lock().unwrap().iter().map(|(id, _)| *id).collect();
        assert!(ids.contains(&b.0) && ids.len() == before + 1, "{ids:?}");
        drop(b);
        assert_eq!(ACTIONS.lock().unwrap().len(), before);
    }
}
