"""vllm_host.py - the stand-in the vLLM cross-check drivers share (import it
before any other vllm module): vLLM's logging and warnings quietened, and
the platform replaced by a bare Platform reporting "cpu".  vLLM would probe
the machine for CUDA, ROCm, CPU...; neither its scheduler nor its
slot-mapping kernel depends on the platform."""
import logging
import os
import warnings

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")
warnings.filterwarnings("ignore")
logging.disable(logging.WARNING)

import vllm.platforms  # noqa: E402
from vllm.platforms.interface import Platform, PlatformEnum  # noqa: E402


class HostPlatform(Platform):
    _enum = PlatformEnum.OOT
    device_name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"


vllm.platforms.current_platform = HostPlatform()
