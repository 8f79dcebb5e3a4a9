"""gpulens: why are your GPUs idle?"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpulens")
except PackageNotFoundError:  # running from a checkout that was not installed
    __version__ = "0.0.0+checkout"
