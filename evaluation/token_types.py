"""The integer types a SUT may send its token ids to LoadGen in: name -> numpy's type code.

Strings, not numpy dtypes, and importing nothing: the CLI offers these names without loading
numpy. Explicit little-endian: LoadGen copies the SUT's buffer verbatim, and every platform the
benchmarks run on is little-endian; the reference scripts use numpy's native order.
"""

TOKEN_DTYPES: dict[str, str] = {
    "int32": "<i4",
    "int64": "<i8",
}
