"""kvtools: libkv in-process.

One module per program (kvmask, kvslot, kvattn), one function per
subcommand or mask kind, one keyword per long option (dashes become
underscores, the same defaults).  Arrays go in and out as numpy arrays;
bad input raises kvtools.Error (a ValueError) carrying the program's own
message.  kvtools.testing is a pytest plugin whose tolerance is the
stated error bound of kvattn(1).
"""
from ._core import Error, bool_keywords as _bool_keywords
from . import kvmask, kvslot, kvattn, kvxattn, kvchunk

_bool_keywords(kvmask, "kvmask", rest=kvmask._dense)
_bool_keywords(kvattn, rest=kvattn.run)
for _m in (kvslot, kvxattn, kvchunk):
    _bool_keywords(_m)
del _m

__version__ = "0.1.0"
__all__ = ["Error", "kvmask", "kvslot", "kvattn", "kvxattn", "kvchunk", "__version__"]
