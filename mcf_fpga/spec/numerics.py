"""The hardware's number formats: fraction bits, widths and lookup tables, defined once.

Pure Python (tables are tuples of ints): the hardware takes its constants and ROM contents from
here, golden's integer arithmetic (``golden.numerics``, on torch tensors) computes with the same
values, and docs/numerics.md describes every format.

Formats (value = integer * 2**-frac_bits unless stated):
  * activations between blocks: INT8 with a per-row power-of-two exponent
    ``e`` (value = q * 2**-e), "requantize" = :func:`golden.numerics.quantize_pow2`;
  * linear outputs, residual stream: int32 fixed point, ``FA`` fraction bits;
  * weights: INT4 in [-7, 7], one uint8 scale mantissa per group of
    ``group_size`` inputs and one exponent per output row
    (w = q * ws[g] * 2**-we), see :class:`golden.numerics.QuantLinear`;
  * KV cache: INT8 or INT4 per (token, kv-head) with a power-of-two exponent;
  * attention logits in the log2 domain: int32 with ``FZ`` fraction bits;
    probabilities Q15; partial state (m, l, o): m like logits, l = sum of Q15
    probabilities (48-bit), o with ``FO`` fraction bits (48-bit).
Rounding everywhere is *round half up* (add half, arithmetic shift right):
``golden.numerics.rshift_round``; division ``round_div`` likewise.
"""
import math

__all__ = ["FA", "FZ", "P_BITS", "FO", "SC", "FR", "RSQRT_MANT_BITS", "SIG_STEP_BITS", "ROPE_BITS",
           "ACC_BITS", "RMS_HP_BITS", "INT32", "M_EMPTY", "EXP2_LUT", "SIGMOID_LUT", "RSQRT_LUT", "score_multiplier"]

FA = 12          # fraction bits of linear outputs and the residual stream (int32)
FZ = 10          # fraction bits of log2-domain attention logits
P_BITS = 15      # probabilities are Q15: 1.0 == 2**15
FO = 16          # fraction bits of the partial attention output o
SC = 15          # fraction bits of the score multiplier log2(e)/sqrt(d)
RMS_HP_BITS = 17  # RMSNorm's pre-shifted element hp = rshift_round(h, sh): |hp| <= 2**15, signed 17 bits
FR = 30          # fraction bits of the RMSNorm reciprocal square root
RSQRT_MANT_BITS = 12   # rsqrt LUT index width: mantissa in [2**10, 2**12)
SIG_STEP_BITS = 6      # sigmoid LUT step 2**-6, range [-8, 8)
ROPE_BITS = 14         # cos/sin tables are Q14
ACC_BITS = 48          # accumulator width of GEMM and attention (DSP48E2 P register)
INT32 = (-(2 ** 31), 2 ** 31 - 1)
M_EMPTY = -(2 ** 30)   # m of an empty partial (no keys): exp2_fixed(M_EMPTY - m) == 0

# exp2 LUT: EXP2_LUT[f] = round(2**15 * 2**(-f / 2**FZ)), f in [0, 2**FZ); EXP2_LUT[0] == 2**15.
EXP2_LUT = tuple(round(2 ** P_BITS * 2.0 ** (-f / 2 ** FZ)) for f in range(2 ** FZ))
# sigmoid LUT: SIGMOID_LUT[j] = round(2**15 * sigmoid((j - 512) / 64)), j in [0, 1024).
SIGMOID_LUT = tuple(round(2 ** 15 / (1.0 + math.exp(-(j - 512) / 2 ** SIG_STEP_BITS)))
                    for j in range(1024))
# rsqrt LUT: RSQRT_LUT[i] = round(2**FR / sqrt(i)) for i >= 1; RSQRT_LUT[0] = 2**FR (unused: ms >= 1).
RSQRT_LUT = (2 ** FR,) + tuple(round(2 ** FR / math.sqrt(i)) for i in range(1, 2 ** RSQRT_MANT_BITS))


def score_multiplier(head_dim: int) -> int:
    """C = round(log2(e) / sqrt(head_dim) * 2**SC): turns q·k into log2-domain logits."""
    return int(round(math.log2(math.e) / math.sqrt(head_dim) * 2 ** SC))
