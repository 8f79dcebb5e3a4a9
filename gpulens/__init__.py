"""gpulens: why are your GPUs idle?"""

#: The one place the version is written: pyproject.toml reads it (tool.setuptools.dynamic), the image
#: workflow checks the tag against it, and the manifests pin it. A literal, not importlib.metadata:
#: looking the installed distribution up costs every gpulens process about 0.1 s at start.
__version__ = "0.1.0"
