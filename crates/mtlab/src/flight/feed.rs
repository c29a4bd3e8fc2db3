//! Feeding the ring from the raw root trace as the program writes it: the
//! bytes below the writer's watermark (every byte reserved below it is
//! written) are read and pushed, the rest once the program has ended.
//! This is the one place that reads the file; a live consumer that reads
//! those bytes anyway can hand them to `Ring::push` instead.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::ring::Ring;

/// Read at most this much per read: the ring compresses as it goes.
const PIECE: u64 = 4 << 20;

pub struct Feed {
    root: PathBuf,
    file: Option<File>,
    fed: u64,
    /// None: the bytes come from elsewhere (`record --live`'s consumer
    /// pushes what it reads, through `Recorder::pusher`), nothing is read here.
    watermark: Option<Box<dyn Fn() -> u64 + Send>>,
}

impl Feed {
    /// Reads `root` up to what `watermark` says is written.
    pub fn new(root: PathBuf, watermark: Box<dyn Fn() -> u64 + Send>) -> Feed {
        Feed { root, file: None, fed: 0, watermark: Some(watermark) }
    }

    /// A feed that reads nothing: another reader of the trace pushes its
    /// bytes (`record --live` releases them once read, so they cannot be
    /// read twice).
    pub fn pushed_by_caller() -> Feed {
        Feed { root: PathBuf::new(), file: None, fed: 0, watermark: None }
    }

    /// Pushes what was written since the last step.
    pub fn step(&mut self, ring: &mut Ring) {
        if let Some(w) = self.watermark.as_ref().map(|w| w()) {
            self.feed_to(ring, w);
        }
    }

    /// After the program has ended: pushes the rest of the file.
    pub fn finish(&mut self, ring: &mut Ring) {
        if self.watermark.is_none() {
            return;
        }
        self.open();
        let len = self.file.as_ref().and_then(|f| f.metadata().ok()).map_or(0, |m| m.len());
        self.feed_to(ring, len);
    }

    fn open(&mut self) {
        if self.file.is_none() {
            // The program's own file: this user's, no link followed.
            self.file = crate::platform::safe_fs::open_owned_regular(&self.root, false).ok();
        }
    }

    fn feed_to(&mut self, ring: &mut Ring, end: u64) {
        if end <= self.fed {
            return;
        }
        self.open();
        let Some(f) = &self.file else { return };
        let mut buf = Vec::new();
        while self.fed < end {
            let n = (end - self.fed).min(PIECE) as usize;
            buf.resize(n, 0);
            if f.read_exact_at(&mut buf, self.fed).is_err() {
                return;
            }
            ring.push(&buf);
            self.fed += n as u64;
        }
    }
}
