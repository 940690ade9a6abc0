//! A hook naming the driver or NVML call in flight, so that whoever watches for hung calls
//! (headroom's watchdog) sees it. Until a hook is installed, `call` does nothing.
//!
//! A sampler makes hundreds of thousands of calls a second, each watched: the hook is two
//! plain functions and a token, so watching a call allocates nothing.

use std::sync::OnceLock;

/// Opens a watch over the named call and returns its token; `close` ends the watch.
#[derive(Debug, Clone, Copy)]
pub struct Hook {
    pub open: fn(&'static str) -> u64,
    pub close: fn(u64),
}

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs the hook every later `call` goes through (the first one installed stays).
pub fn install(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// The call is watched until this is dropped.
#[must_use = "the call is watched until the guard is dropped"]
pub struct CallGuard {
    watch: Option<(fn(u64), u64)>,
}

/// Watches `name` (a driver or NVML entry point) until the guard is dropped.
pub fn call(name: &'static str) -> CallGuard {
    CallGuard {
        watch: HOOK.get().map(|h| (h.close, (h.open)(name))),
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        if let Some((close, token)) = self.watch {
            close(token);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    thread_local! {
        static OPEN: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn an_installed_hook_watches_until_the_guard_is_dropped() {
        super::install(super::Hook {
            open: |name| {
                let token = name.len() as u64;
                OPEN.with(|o| o.borrow_mut().push(token));
                token
            },
            close: |token| OPEN.with(|o| o.borrow_mut().retain(|t| *t != token)),
        });
        let g = super::call("cuMemGetInfo");
        assert_eq!(
            OPEN.with(|o| o.borrow().clone()),
            ["cuMemGetInfo".len() as u64]
        );
        drop(g);
        assert!(OPEN.with(|o| o.borrow().is_empty()));
    }
}
