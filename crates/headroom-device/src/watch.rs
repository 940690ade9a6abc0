//! A hook naming the driver or NVML call in flight, so that whoever watches for hung calls
//! (headroom's watchdog) sees it. Until a hook is installed, `call` does nothing.

use std::any::Any;
use std::sync::OnceLock;

/// Opens a watch over the named call; dropping what it returns ends the watch.
pub type Hook = fn(&'static str) -> Box<dyn Any>;

static HOOK: OnceLock<Hook> = OnceLock::new();

/// Installs the hook every later `call` goes through (the first one installed stays).
pub fn install(hook: Hook) {
    let _ = HOOK.set(hook);
}

/// The call is watched until this is dropped.
#[must_use = "the call is watched until the guard is dropped"]
pub struct CallGuard {
    _watch: Option<Box<dyn Any>>,
}

/// Watches `name` (a driver or NVML entry point) until the guard is dropped.
pub fn call(name: &'static str) -> CallGuard {
    CallGuard {
        _watch: HOOK.get().map(|hook| hook(name)),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    thread_local! {
        static OPEN: Cell<u32> = const { Cell::new(0) };
    }

    struct Open;
    impl Drop for Open {
        fn drop(&mut self) {
            OPEN.with(|o| o.set(o.get() - 1));
        }
    }

    #[test]
    fn an_installed_hook_watches_until_the_guard_is_dropped() {
        super::install(|_| {
            OPEN.with(|o| o.set(o.get() + 1));
            Box::new(Open)
        });
        let g = super::call("cuMemGetInfo");
        assert_eq!(OPEN.with(Cell::get), 1);
        drop(g);
        assert_eq!(OPEN.with(Cell::get), 0);
    }
}
