//! A test's scratch folder in the temp dir, `loadshape-WHAT-XXXXXX`: removed when the test passes, kept when it
//! fails (its path on stderr) so the failure can be inspected. One file for the integration tests
//! (`#[path = "common/scratch.rs"] mod scratch;`) and the agent's unit tests (`crate::scratch`, from src/lib.rs).
//! Declare it before anything that writes into it (a server, a store): locals drop in reverse order, so the
//! writer stops before the folder goes.

use std::path::Path;

pub struct Scratch(tempfile::TempDir);

impl Scratch {
    /// A new empty folder `loadshape-{what}-XXXXXX` in `std::env::temp_dir()` (`TMPDIR`).
    pub fn new(what: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("loadshape-{what}-"))
            .tempdir()
            .unwrap_or_else(|e| panic!("scratch folder in {}: {e}", std::env::temp_dir().display()));
        Scratch(dir)
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        // A failing test unwinds through here: keep what it wrote. Otherwise the `TempDir` removes the folder.
        if std::thread::panicking() {
            self.0.disable_cleanup(true);
            eprintln!("scratch kept: {}", self.0.path().display());
        }
    }
}
