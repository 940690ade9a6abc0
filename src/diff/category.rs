//! What kind of memory an allocation is, told from the stack that made it: parameters,
//! activations, gradients, optimizer state — or `unknown` when the stack does not say, and the
//! allocation is then compared by its source line alone.
//!
//! An allocator snapshot records no categories (PyTorch's `_memory_profiler` infers them from
//! a profiler trace, which a snapshot does not hold), so the frames are the evidence: the
//! files and functions of PyTorch that run in each stage of a training step
//! (`torch/optim/*.py`; `torch/autograd/__init__.py` `backward` and `Tensor.backward` in
//! `torch/_tensor.py`, and the C++ `…Backward…::apply` nodes of autograd's engine;
//! `torch/nn/modules/module.py` `_apply` (`.to()`/`.cuda()`) and `torch/nn/parameter.py`;
//! `torch/nn/modules/module.py` `_call_impl` for a forward pass), as of PyTorch 2.5.

use serde::{Deserialize, Serialize};

use crate::import::torch::model::Frame;

/// The kind of memory an allocation holds, as its stack tells.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Made while moving or creating a module's parameters (`.to()`, `.cuda()`, `Parameter`).
    Parameters,
    /// Made inside a module's forward pass.
    Activations,
    /// Made by the backward pass (autograd).
    Gradients,
    /// Made inside an optimizer (`torch/optim/`): its state and the step's temporaries.
    OptimizerState,
    /// The stack names none of the above (or no stack was recorded).
    Unknown,
}

impl Category {
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameters => "parameters",
            Category::Activations => "activations",
            Category::Gradients => "gradients",
            Category::OptimizerState => "optimizer_state",
            Category::Unknown => "unknown",
        }
    }
}

fn in_torch(f: &Frame, file: &str) -> bool {
    f.filename.replace('\\', "/").contains(file)
}

/// The category of a stack (innermost frame first). The innermost stage wins: an optimizer
/// step inside a function called from a forward pass is optimizer state.
pub fn classify<'a>(frames: impl IntoIterator<Item = &'a Frame>) -> Category {
    for f in frames {
        if in_torch(f, "torch/optim/") {
            return Category::OptimizerState;
        }
        let backward_py = (in_torch(f, "torch/autograd/") || in_torch(f, "torch/_tensor.py"))
            && f.name == "backward";
        if backward_py || (f.name.contains("Backward") && f.name.contains("::apply")) {
            return Category::Gradients;
        }
        if in_torch(f, "torch/nn/parameter.py")
            || (in_torch(f, "torch/nn/modules/module.py")
                && matches!(f.name.as_str(), "_apply" | "to" | "cuda" | "convert"))
        {
            return Category::Parameters;
        }
        if in_torch(f, "torch/nn/modules/module.py")
            && matches!(f.name.as_str(), "_call_impl" | "_wrapped_call_impl")
        {
            return Category::Activations;
        }
    }
    Category::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(file: &str, name: &str) -> Frame {
        Frame {
            filename: file.into(),
            line: 1,
            name: name.into(),
        }
    }

    #[test]
    fn the_innermost_stage_decides() {
        let lib = "/usr/lib/python3.11/site-packages/torch";
        let fwd = [
            f(&format!("{lib}/nn/modules/linear.py"), "forward"),
            f(&format!("{lib}/nn/modules/module.py"), "_call_impl"),
            f("/home/u/train.py", "step"),
        ];
        assert_eq!(classify(&fwd), Category::Activations);
        let opt = [
            f(&format!("{lib}/optim/adam.py"), "_init_group"),
            f(&format!("{lib}/nn/modules/module.py"), "_call_impl"),
        ];
        assert_eq!(classify(&opt), Category::OptimizerState);
        let bwd = [
            f("", "torch::autograd::generated::MmBackward0::apply(...)"),
            f(&format!("{lib}/autograd/__init__.py"), "backward"),
        ];
        assert_eq!(classify(&bwd), Category::Gradients);
        let params = [f(&format!("{lib}/nn/modules/module.py"), "_apply")];
        assert_eq!(classify(&params), Category::Parameters);
        assert_eq!(
            classify(&[f("/home/u/train.py", "main")]),
            Category::Unknown
        );
        assert_eq!(classify(&[]), Category::Unknown);
    }
}
