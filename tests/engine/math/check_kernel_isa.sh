#!/bin/sh
# check_kernel_isa.sh [--no-baseline] OBJDUMP OBJECT... - fails when an engine object holds an instruction outside
# the level it is chosen at (engine/CMakeLists.txt compiles each kernel file for the level in its
# name; math/x86/cpu_x86.c and math/arm/cpu_arm.c pick the level from the CPU). The kernel table
# chooses a file only when the CPU has its level, so an instruction beyond that level is a SIGILL
# waiting for a CPU that has the level and not the instruction (issue 41: shrx in every AVX2 file).
#
# The level comes from the object's file name (amx*, avx512_bf16*, avx512_vnni*, avx512*, avx_vnni*,
# avx2*; bf16*, i8mm*, dotprod*, neon*); every other object (the portable kernels, cpu_*, kern_*) is
# baseline: x86-64 with SSE2, or ARMv8-A; --no-baseline leaves those out (ADAPTERD_NATIVE builds them
# for the build machine). The architecture comes from objdump -f. An argument may hold several
# objects separated by ';' (CMake's $<TARGET_OBJECTS:...> list).
#
# What it checks, per instruction of objdump -d:
#   x86, by encoding: no VEX (c4/c5) at baseline, no EVEX (62) below the AVX-512 levels;
#   x86, by text: no zmm, ymm/xmm16-31 or k registers below AVX-512; by mnemonic, everything listed
#     below for the levels that lack it: SSE3-SSE4.2, POPCNT, BMI1/2, LZCNT, MOVBE and CRC32 at
#     baseline; AVX-VNNI (vpdp* with VEX), AVX-512 VNNI, AVX-512 BF16, AMX; and, at every level,
#     extensions no level includes (AES, PCLMUL, SHA, GFNI, VAES, ADX, RDRAND, IFMA, VBMI/VBMI2,
#     BITALG, VPOPCNTDQ, VP2INTERSECT, AVX-512 FP16, AVX-VNNI-INT8/16, Xeon Phi's ER/PF/4FMAPS).
#   ARM64, by mnemonic and operands: no sdot/udot, no ARMv8.1-A's LSE atomics, CRC32, sqrdmlah at
#     neon and baseline; no i8mm (smmla, ummla, usmmla, usdot, sudot) below i8mm; no bf16 (bfdot,
#     bfmmla, bfmlal, bfcvt) below bf16; and at every level no SVE (z/p registers), no
#     FP16 FML (fmlal), no ARMv8.3+ (fcmla, fcadd, fjcvtzs, ldapr) or ARMv8.5 (frint32/64).
# What it does not check: an AVX-512 instruction on xmm/ymm registers 0-15 is caught by its EVEX
# encoding, not named; a mnemonic list is never complete (an extension left out of it passes), and
# ARM64's FP16 arithmetic (h registers) is not checked; code reached only through inline assembly in
# a file of the right name is taken as intended. Exits 77 (skipped) when objdump is missing or
# cannot read the objects (a cross-build without the cross binutils).
baseline=1
if [ "$1" = --no-baseline ]; then
  baseline=0
  shift
fi
objdump=$1
shift
objs=$(printf '%s\n' "$@" | tr ';' '\n')
IFS='
'
set -- $objs
unset IFS
if [ -z "$objdump" ] || ! command -v "$objdump" >/dev/null 2>&1; then
  echo "SKIP: no objdump (\"$objdump\")"
  exit 77
fi
[ $# -gt 0 ] || { echo "no objects given"; exit 2; }
fmt=$("$objdump" -f "$1" 2>/dev/null | sed -n 's/.*file format //p' | head -n 1)
case $fmt in
  *x86-64*) arch=x86 ;;
  *aarch64*) arch=arm ;;
  *) echo "SKIP: $objdump reads \"$1\" as \"$fmt\": neither x86-64 nor ARM64"; exit 77 ;;
esac

bad=0 checked=0
for obj in "$@"; do
  name=$(basename "$obj")
  name=${name%.o}
  name=${name%.c}
  case $arch:$name in
    x86:amx*) level=amx ;;
    x86:avx512_bf16*) level=avx512_bf16 ;;
    x86:avx512_vnni*) level=avx512_vnni ;;
    x86:avx512*) level=avx512 ;;
    x86:avx_vnni*) level=avx_vnni ;;
    x86:avx2*) level=avx2 ;;
    arm:bf16*) level=bf16 ;;
    arm:i8mm*) level=i8mm ;;
    arm:dotprod*) level=dotprod ;;
    arm:neon*) level=neon ;;
    *) level=baseline ;;
  esac
  [ $level = baseline ] && [ $baseline = 0 ] && continue
  checked=$((checked + 1))
  out=$("$objdump" -d --no-addresses "$obj" 2>/dev/null || "$objdump" -d "$obj") || { echo "FAIL: $objdump -d $obj"; bad=1; continue; }
  found=$(printf '%s\n' "$out" | awk -F'\t' -v arch="$arch" -v level="$level" '
    function report(why) { if (n++ < 5) printf "  %s: %s (%s)\n", sym, ins, why }
    /^[0-9a-f]+ <.*>:$/ || /^<.*>:$/ { sym = $0; sub(/:$/, "", sym); next }
    NF >= 2 {
      # with --no-addresses the bytes are field 2 and the instruction field 3; without, the same
      # after the address "  1c:" in field 1. A continuation line of bytes has no instruction.
      if (NF < 3) next
      bytes = $2; ins = $3
      for (i = 4; i <= NF; i++) ins = ins "\t" $i
      gsub(/^[ \t]+|[ \t]+$/, "", ins)
      if (ins == "") next
      # the mnemonic after prefixes and pseudo-prefixes
      m = ins; vexp = 0
      while (match(m, /^(\{vex\}|\{vex3\}|\{evex\}|rep|repz|repnz|repe|repne|lock|data16|addr32|cs|ds|es|ss|fs|gs|notrack|bnd)[ \t]+/)) {
        if (substr(m, 1, 4) == "{vex") vexp = 1
        m = substr(m, RLENGTH + 1)
      }
      ops = m; sub(/^[^ \t]+[ \t]*/, "", ops)
      sub(/[ \t].*/, "", m)
      if (arch == "x86") {
        # the first opcode byte after segment and address-size prefixes: VEX is c4/c5, EVEX 62
        nb = split(bytes, b, " "); op = ""
        for (i = 1; i <= nb; i++) if (b[i] !~ /^(26|2e|36|3e|64|65|67)$/) { op = b[i]; break }
        v4 = level ~ /^(avx512|amx)/
        if (level == "baseline" && (op == "c4" || op == "c5")) report("VEX encoding: AVX or later")
        else if (!v4 && op == "62") report("EVEX encoding: AVX-512")
        if (!v4 && (ops ~ /%(zmm[0-9]|[xy]mm(1[6-9]|2[0-9]|3[01])|k[0-7])/)) report("AVX-512 register")
        if (!v4 && (m ~ /^k(mov|and|andn|or|xor|xnor|not|test|ortest|shiftl|shiftr|add|unpck)[bwdq]*$/)) report("AVX-512 mask instruction")
        if (level == "baseline") {
          if ((m ~ /^(popcnt|lzcnt|tzcnt|andn|bextr|blsi|blsmsk|blsr|bzhi|pdep|pext|mulx|rorx|sarx|shlx|shrx|movbe|crc32[bwlq]?|cmpxchg16b|lahf|sahf)$/)) report("beyond x86-64: v2 or v3")
          if ((m ~ /^(addsubp[sd]|hadd[ps][sd]|hsub[ps][sd]|lddqu|movddup|movshdup|movsldup|monitor|mwait)$/)) report("SSE3")
          if ((m ~ /^(pabs[bwd]|palignr|phadd(w|d|sw)|phsub(w|d|sw)|pmaddubsw|pmulhrsw|pshufb|psign[bwd])$/)) report("SSSE3")
          if ((m ~ /^(blendp[sd]|blendvp[sd]|dpp[sd]|extractps|insertps|movntdqa|mpsadbw|packusdw|pblendvb|pblendw|pcmpeqq|pextr[bdq]|phminposuw|pinsr[bdq]|pmax(sb|sd|ud|uw)|pmin(sb|sd|ud|uw)|pmov[sz]x(bw|bd|bq|wd|wq|dq)|pmuldq|pmulld|ptest|round[ps][sd])$/)) report("SSE4.1")
          if ((m ~ /^(pcmp[ei]str[im]|pcmpgtq)$/)) report("SSE4.2")
        }
        if (level !~ /^(avx_vnni|avx512_vnni|amx)$/ && (m ~ /^vpdp/)) report("VNNI")
        if (level != "avx_vnni" && vexp && (m ~ /^vpdp/)) report("AVX-VNNI (VEX) without -mavxvnni")
        if (level !~ /^(avx512_bf16|amx)$/ && (m ~ /^(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)$/)) report("AVX-512 BF16")
        if (level != "amx" && (m ~ /^(ldtilecfg|sttilecfg|tile.*|tdp.*)$/)) report("AMX")
        if ((m ~ /^(v?aes.*|v?pclmul.*|sha1.*|sha256.*|v?gf2p8.*|adcx|adox|rdrand|rdseed|prefetchwt?1?|xbegin|xend|xabort|xtest|vpmadd52.*|vpermb|vperm[it]2b|vpmultishiftqb|vpcompress[bw]|vpexpand[bw]|vpsh[lr]dv?[wdq]|vpopcnt[bwdq]|vpshufbitqmb|vp2intersect[dq]|vpdpb(ss|su|uu)ds?|vpdpw(su|us|uu)ds?|vcvtph2psx|vexp2p[sd]|vrcp28.*|vrsqrt28.*|v?gatherpf.*|v?scatterpf.*|v4f.*|vp4dpwssds?|vbcstnes.*|vcvtne(e|o).*)$/)) report("an extension no level includes")
        if (m != "vcvtps2ph" && (m ~ /^v.*(ph|sh)$/)) report("AVX-512 FP16")
      } else {
        if (level ~ /^(baseline|neon)$/) {
          if ((m ~ /^[su]dot$/)) report("dotprod")
          if ((m ~ /^(cas|casp|ldadd|ldclr|ldeor|ldset|ldsmax|ldsmin|ldumax|ldumin|swp|stadd|stclr|steor|stset|stsmax|stsmin|stumax|stumin)(a|l|al)?[bh]?$/)) report("LSE atomics (ARMv8.1-A)")
          if ((m ~ /^crc32c?[bhwx]$/)) report("CRC32")
          if ((m ~ /^sqrdml[as]h$/)) report("RDM (ARMv8.1-A)")
        }
        if (level !~ /^(i8mm|bf16)$/ && (m ~ /^(smmla|ummla|usmmla|usdot|sudot)$/)) report("i8mm")
        if (level != "bf16" && (m ~ /^(bfdot|bfmmla|bfmlal[bt]|bfcvt|bfcvtn2?)$/)) report("bf16")
        if ((ops ~ /(^|[ ,{\[])(z[0-9]+\.|p[0-9]+\/|p[0-9]+\.)/) || (m ~ /^(ptrue|whilelo|whilelt|ld1[bhwd]|st1[bhwd])$/) && (ops ~ /z[0-9]/)) report("SVE")
        if ((m ~ /^(fmlal2?|fmlsl2?|fcmla|fcadd|fjcvtzs|ldapr[bh]?|ldapur.*|frint32[xz]|frint64[xz])$/)) report("an extension no level includes")
      }
    }
    END { if (n > 5) printf "  ... %d in all\n", n; exit n > 0 }')
  if [ -n "$found" ]; then
    echo "FAIL: $obj (level $level):"
    printf '%s\n' "$found"
    bad=1
  fi
done
echo "checked $checked objects ($arch)"
exit $bad
