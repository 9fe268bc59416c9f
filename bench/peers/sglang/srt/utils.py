# The one helper mini_lb imports from sglang.srt.utils, for running it without SGLang installed.
def maybe_wrap_ipv6_address(address):
    return f"[{address}]" if address and ":" in address else address
