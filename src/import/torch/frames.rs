//! Which frame of a stack is the user's line: PyTorch records the whole stack (C++ frames
//! too, with `stacks="all"`), innermost first; the line a user can act on is the innermost
//! Python frame outside PyTorch itself.

use super::model::{Frame, Snapshot};

/// Frames PyTorch's own viewer leaves out (`_memory_viz._frame_filter`).
const OMIT_NAMES: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "_start",
    "__libc_start_main",
    "PyEval_",
    "PyObject_",
    "PyFunction_",
];
const OMIT_FILES: &[&str] = &[
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// A Python source file that is not part of PyTorch (nor Python's own machinery).
fn is_user_python(f: &Frame) -> bool {
    let file = f.filename.replace('\\', "/");
    file.ends_with(".py")
        && !file.contains("/torch/")
        && !file.starts_with("torch/")
        && !file.contains("/site-packages/torch")
        && !file.starts_with('<')
}

fn is_shown(f: &Frame) -> bool {
    !OMIT_NAMES.iter().any(|o| f.name.contains(o))
        && !OMIT_FILES.iter().any(|o| f.filename.contains(o))
}

/// The allocator's and the dispatcher's own C++ frames: never the answer.
fn is_machinery(f: &Frame) -> bool {
    [
        "CUDACachingAllocator",
        "c10::",
        "at::detail::empty",
        "at::empty",
        "at::_ops::",
    ]
    .iter()
    .any(|m| f.name.contains(m))
        || f.name.starts_with("at::cuda::")
}

/// The frame a user would act on: the innermost Python frame outside PyTorch; else the
/// innermost Python frame; else, for a stack with C++ frames only (autograd's backward
/// threads), the autograd node that ran, or the operator, or the first frame past the
/// allocator; else the innermost frame PyTorch's viewer would show.
pub fn user_frame(snap: &Snapshot, stack: u32) -> Option<&Frame> {
    let frames: Vec<&Frame> = snap.frames.stack(stack).collect();
    frames
        .iter()
        .find(|f| is_user_python(f))
        .or_else(|| frames.iter().find(|f| f.filename.ends_with(".py")))
        .or_else(|| {
            frames
                .iter()
                .find(|f| f.name.contains("Backward") && f.name.contains("::apply"))
        })
        .or_else(|| frames.iter().find(|f| f.name.contains("at::native::")))
        .or_else(|| frames.iter().find(|f| is_shown(f) && !is_machinery(f)))
        .or_else(|| frames.iter().find(|f| is_shown(f)))
        .copied()
}

/// A C++ function's name without its arguments and outer namespaces:
/// `torch::autograd::generated::AddmmBackward0::apply(…)` → `AddmmBackward0::apply`.
fn cpp_name(name: &str) -> String {
    let bare = name.split('(').next().unwrap_or(name);
    let parts: Vec<&str> = bare.rsplit("::").take(2).collect();
    parts.into_iter().rev().collect::<Vec<_>>().join("::")
}

/// `train.py:42 (step)` for people (`AddmmBackward0::apply (C++)` for a C++ frame);
/// `(no frames recorded)` when the stack is empty.
pub fn short(f: Option<&Frame>) -> String {
    match f {
        None => "(no frames recorded)".into(),
        Some(f) if !f.filename.ends_with(".py") => format!("{} (C++)", cpp_name(&f.name)),
        Some(f) => {
            let file = f.filename.rsplit(['/', '\\']).next().unwrap_or(&f.filename);
            if f.name.is_empty() {
                format!("{file}:{}", f.line)
            } else {
                format!("{file}:{} ({})", f.line, f.name)
            }
        }
    }
}

/// `path/to/train.py:42 (step)`: the full file name.
pub fn long(f: Option<&Frame>) -> String {
    match f {
        None => String::new(),
        Some(f) => format!("{}:{} ({})", f.filename, f.line, f.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::torch::model::Encoding;

    fn frame(file: &str, line: i64, name: &str) -> Frame {
        Frame {
            filename: file.into(),
            line,
            name: name.into(),
        }
    }

    #[test]
    fn the_users_line_skips_cpp_and_torch_frames() {
        let mut s = Snapshot::empty("x", Encoding::Json);
        let ids: Vec<u32> = [
            frame("??", 0, "torch::unwind::unwind()"),
            frame("CUDACachingAllocator.cpp", 0, "malloc"),
            frame(
                "/usr/lib/python3.11/site-packages/torch/nn/modules/linear.py",
                125,
                "forward",
            ),
            frame("/home/me/train.py", 42, "step"),
            frame("/home/me/train.py", 90, "<module>"),
        ]
        .into_iter()
        .map(|f| s.frames.frame_id(f))
        .collect();
        let stack = s.frames.stack_id(&ids);
        let f = user_frame(&s, stack);
        assert_eq!(short(f), "train.py:42 (step)");
        assert_eq!(long(f), "/home/me/train.py:42 (step)");
        // Only PyTorch frames: its innermost Python frame.
        let torch_only = s.frames.stack_id(&ids[..3]);
        assert_eq!(short(user_frame(&s, torch_only)), "linear.py:125 (forward)");
        // Only C++ (autograd's backward thread): the autograd node that ran.
        let node = s.frames.frame_id(frame(
            "??",
            0,
            "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor>&&)",
        ));
        let backward = s.frames.stack_id(&[ids[0], ids[1], node]);
        assert_eq!(
            short(user_frame(&s, backward)),
            "AddmmBackward0::apply (C++)"
        );
        // Only C++, no node: the first frame PyTorch's viewer shows.
        let cpp = s.frames.stack_id(&ids[..2]);
        assert_eq!(short(user_frame(&s, cpp)), "malloc (C++)");
        assert_eq!(short(user_frame(&s, 0)), "(no frames recorded)");
    }
}
