//! `graphs`'s own rules, checked from outside the library.

use headroom_fake_gpu::graphs::*;

#[test]
fn transient_peak_and_unfreed() {
    const MIB: u64 = 1 << 20;
    let nodes = vec![
        Node::Alloc {
            ptr: 1 << 30,
            bytes: 3 * MIB,
        },
        Node::Alloc {
            ptr: 2 << 30,
            bytes: MIB,
        },
        Node::Free { ptr: 1 << 30 },
        Node::Alloc {
            ptr: 3 << 30,
            bytes: 5 * MIB,
        },
        Node::Free { ptr: 3 << 30 },
    ];
    let (peak, unfreed, own) = summarize(&nodes, 2 * MIB);
    assert_eq!(peak, 6 * MIB);
    assert_eq!(unfreed, vec![(2 << 30, 2 * MIB, MIB)]);
    assert_eq!(own.len(), 3);
}
