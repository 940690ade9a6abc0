#!/usr/bin/env bash
# Regenerates kernels/*.ptx from kernels/*.cu with NVRTC 12.4 (compute_70), declared as PTX ISA
# 6.0: the lowest ISA the kernels need (shfl.sync and .target sm_70 are ISA 6.0), so every
# driver from R470 on (the oldest branch with every driver function headroom calls) JIT-compiles
# it. NVRTC 12.4 writes `.version 8.4`; only that line is changed.
#
#   bash kernels/build.sh           writes kernels/<name>.ptx for every kernels/<name>.cu
#   bash kernels/build.sh --check   regenerates into a temporary folder, fails if a committed
#                                   .ptx differs or is missing or stale; assembles every .ptx
#                                   with ptxas 12.4 for sm_70 to sm_90 and requires the cubin to
#                                   be byte-identical to that of NVRTC's own `.version 8.4`
#                                   text; assembles it with ptxas 11.7 (the oldest toolkit on
#                                   PyPI) for sm_70 to sm_86; checks that ISA 5.0 is refused
#                                   (so 6.0 is the lowest); prints registers, stack frame and
#                                   spills per kernel
#
# Needs only python3 with pip: the pinned NVRTC and ptxas wheels are installed into
# .kernels-toolchain/ (git-ignored) on first use and reused afterwards. No GPU is needed.
set -euo pipefail

NVRTC_PKG=nvidia-cuda-nvrtc-cu12
NVRTC_VERSION=12.4.127
NVCC_PKG=nvidia-cuda-nvcc-cu12
NVCC_VERSION=12.4.131
NVCC_OLD_PKG=nvidia-cuda-nvcc-cu11
NVCC_OLD_VERSION=11.7.99
NVRTC_OPTIONS=(--gpu-architecture=compute_70)
# The ISA NVRTC 12.4 declares, and the one the committed PTX declares.
NVRTC_ISA=8.4
PTX_ISA=6.0
# One ISA below the floor, which ptxas must refuse.
BELOW_ISA=5.0
PTXAS_ARCHS=(sm_70 sm_75 sm_80 sm_86 sm_89 sm_90)
PTXAS_OLD_ARCHS=(sm_70 sm_75 sm_80 sm_86)
TABLE_ARCHS=(sm_80 sm_90)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
toolchain="$root/.kernels-toolchain"
nvrtc_lib="$toolchain/nvidia/cuda_nvrtc/lib/libnvrtc.so.12"
ptxas="$toolchain/nvidia/cuda_nvcc/bin/ptxas"
old_toolchain="$root/.kernels-toolchain/cu11"
ptxas_old="$old_toolchain/nvidia/cuda_nvcc/bin/ptxas"

die() {
    echo "kernels/build.sh: $*" >&2
    exit 1
}

check=0
case "${1:-}" in
    "") ;;
    --check) check=1 ;;
    -h | --help)
        sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *) die "unknown argument '$1' (expected nothing or --check)" ;;
esac

command -v python3 >/dev/null || die "python3 is needed"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The toolchain is current when both wheels are installed at the pinned versions.
toolchain_ok() {
    [[ -f "$nvrtc_lib" && -x "$ptxas" &&
        -d "$toolchain/${NVRTC_PKG//-/_}-$NVRTC_VERSION.dist-info" &&
        -d "$toolchain/${NVCC_PKG//-/_}-$NVCC_VERSION.dist-info" ]]
}

if ! toolchain_ok; then
    python3 -m pip --version >/dev/null 2>&1 || die "python3 -m pip is needed to install the CUDA 12.4 wheels"
    # --upgrade replaces whatever an earlier, interrupted or different-version install left.
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
        --no-deps --no-input --upgrade --target "$toolchain" \
        "$NVRTC_PKG==$NVRTC_VERSION" "$NVCC_PKG==$NVCC_VERSION" >"$tmp/pip.log" 2>&1; then
        cat "$tmp/pip.log" >&2
        die "installing $NVRTC_PKG==$NVRTC_VERSION and $NVCC_PKG==$NVCC_VERSION failed"
    fi
    toolchain_ok || die "the wheels installed but $nvrtc_lib or $ptxas is missing"
fi

shopt -s nullglob
sources=("$here"/*.cu)
((${#sources[@]} > 0)) || die "no kernels/*.cu found"

out="$here"
if ((check)); then
    out="$tmp/ptx"
    mkdir -p "$out"
fi

# NVRTC writes into $tmp/nvrtc; each file is then copied to $out with its ISA line lowered.
nvrtc_out="$tmp/nvrtc"
mkdir -p "$nvrtc_out"
nvrtc_args=(--lib "$nvrtc_lib" --out-dir "$nvrtc_out" --expect-version 12.4)
for option in "${NVRTC_OPTIONS[@]}"; do
    nvrtc_args+=("--option=$option")
done
python3 "$here/nvrtc.py" "${nvrtc_args[@]}" "${sources[@]}"
for generated in "$nvrtc_out"/*.ptx; do
    name="$(basename "$generated")"
    count="$(grep -c "^\.version $NVRTC_ISA\$" "$generated" || true)"
    [[ "$count" == 1 ]] || die "$name: expected one '.version $NVRTC_ISA' line from NVRTC, found $count"
    sed "s/^\.version $NVRTC_ISA\$/.version $PTX_ISA/" "$generated" >"$out/$name"
done

if ((!check)); then
    exit 0
fi

# The committed PTX must be exactly what NVRTC produces now (no normalization: the output is
# deterministic), with one .ptx per .cu and no .ptx left over from a removed source.
stale=0
for generated in "$out"/*.ptx; do
    name="$(basename "$generated")"
    committed="$here/$name"
    if [[ ! -f "$committed" ]]; then
        echo "kernels/$name is missing: run bash kernels/build.sh and commit it" >&2
        stale=1
    elif ! cmp -s "$generated" "$committed"; then
        echo "kernels/$name differs from what kernels/${name%.ptx}.cu compiles to:" >&2
        diff -u "$committed" "$generated" | head -n 40 >&2 || true
        echo "run bash kernels/build.sh and commit the result" >&2
        stale=1
    fi
done
for committed in "$here"/*.ptx; do
    name="$(basename "$committed")"
    if [[ ! -f "$here/${name%.ptx}.cu" ]]; then
        echo "kernels/$name has no kernels/${name%.ptx}.cu: remove it" >&2
        stale=1
    fi
done
((stale == 0)) || exit 1

# ptxas 11.7, for the check that the PTX assembles with a toolkit older than CUDA 12.
if [[ ! -x "$ptxas_old" || ! -d "$old_toolchain/${NVCC_OLD_PKG//-/_}-$NVCC_OLD_VERSION.dist-info" ]]; then
    if ! PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
        --no-deps --no-input --upgrade --target "$old_toolchain" \
        "$NVCC_OLD_PKG==$NVCC_OLD_VERSION" >"$tmp/pip-old.log" 2>&1; then
        cat "$tmp/pip-old.log" >&2
        die "installing $NVCC_OLD_PKG==$NVCC_OLD_VERSION failed"
    fi
    [[ -x "$ptxas_old" ]] || die "the wheel installed but $ptxas_old is missing"
fi

# Assemble every PTX for each architecture: the cubin of the lowered text must be the cubin of
# NVRTC's own text, byte for byte (the ISA line changes no instruction). Collect ptxas -v of
# the table's architectures into one table.
table="$tmp/table.tsv"
failed=0
for ptx in "$here"/*.ptx; do
    name="$(basename "$ptx")"
    for arch in "${PTXAS_ARCHS[@]}"; do
        log="$tmp/ptxas.log"
        if ! "$ptxas" -arch="$arch" -v --warning-as-error -o "$tmp/lowered.cubin" "$ptx" >"$log" 2>&1; then
            echo "ptxas -arch=$arch $name failed:" >&2
            cat "$log" >&2
            failed=1
            continue
        fi
        if ! "$ptxas" -arch="$arch" -o "$tmp/nvrtc.cubin" "$nvrtc_out/$name" >"$tmp/ptxas-nvrtc.log" 2>&1; then
            echo "ptxas -arch=$arch of NVRTC's own $name failed:" >&2
            cat "$tmp/ptxas-nvrtc.log" >&2
            failed=1
        elif ! cmp -s "$tmp/lowered.cubin" "$tmp/nvrtc.cubin"; then
            echo "$name for $arch: the cubin of .version $PTX_ISA differs from that of .version $NVRTC_ISA" >&2
            failed=1
        fi
        [[ " ${TABLE_ARCHS[*]} " == *" $arch "* ]] || continue
        # ptxas -v prints, per entry: "Compiling entry function 'NAME' for 'ARCH'", then
        # "N bytes stack frame, N bytes spill stores, N bytes spill loads", then "Used N registers".
        awk -v arch="$arch" '
            /Compiling entry function/ { split($0, q, "'\''"); name = q[2]; stack = "?"; st = "?"; ld = "?" }
            /bytes stack frame/ { stack = $1; st = $5; ld = $9 }
            /Used [0-9]+ registers/ {
                for (i = 1; i <= NF; i++) if ($i == "Used") regs = $(i + 1)
                printf "%s\t%s\t%s\t%s\t%s\t%s\n", name, arch, regs, stack, st, ld
            }' "$log" >>"$table"
    done
done
for ptx in "$here"/*.ptx; do
    name="$(basename "$ptx")"
    for arch in "${PTXAS_OLD_ARCHS[@]}"; do
        if ! "$ptxas_old" -arch="$arch" --warning-as-error -o /dev/null "$ptx" >"$tmp/ptxas-old.log" 2>&1; then
            echo "ptxas $NVCC_OLD_VERSION -arch=$arch $name failed:" >&2
            cat "$tmp/ptxas-old.log" >&2
            failed=1
        fi
    done
    sed "s/^\.version $PTX_ISA\$/.version $BELOW_ISA/" "$ptx" >"$tmp/below.ptx"
    if "$ptxas" -arch=sm_70 -o /dev/null "$tmp/below.ptx" >/dev/null 2>&1; then
        echo "$name still assembles as .version $BELOW_ISA: lower PTX_ISA" >&2
        failed=1
    fi
done
((failed == 0)) || exit 1
echo "PTX ISA $PTX_ISA: cubins identical to NVRTC's ISA $NVRTC_ISA text on ${PTXAS_ARCHS[*]} (ptxas 12.4);"
echo "assembles with ptxas $NVCC_OLD_VERSION on ${PTXAS_OLD_ARCHS[*]}; ISA $BELOW_ISA refused"

{
    printf "kernel\tarch\tregisters\tstack_bytes\tspill_store_bytes\tspill_load_bytes\n"
    sort -t $'\t' -k1,1 -k2,2 "$table"
} | awk -F '\t' '{ printf "%-10s %-5s %9s %11s %17s %16s\n", $1, $2, $3, $4, $5, $6 }'
