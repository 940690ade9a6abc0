//! `kernels`'s own rules, checked from outside the library.

use headroom_fake_gpu::kernels::*;

#[test]
fn kinds_need_the_exact_parameter_list() {
    let m = headroom_fake_gpu::ptx::parse(
        include_bytes!("../../../../../kernels/verify.ptx"),
        90,
        headroom_fake_gpu::ptx::MAX_VERSION,
    )
    .unwrap();
    assert_eq!(Kind::of(&m.entries[0]), Some(Kind::Verify));
    let mut wrong = m.entries[0].clone();
    wrong.params.pop();
    assert_eq!(Kind::of(&wrong), None);
}

#[test]
fn the_stack_sum_is_the_frame_total() {
    // Sum of i ^ 0 over 1024 words.
    assert_eq!(stack_sum(0, 1024), 1023 * 1024 / 2);
}
