# gpulens: exporter, analyzer and tools in one image. Runs as an unprivileged user; the Kubernetes
# DaemonSet overrides that only where the kubelet's root-owned pod-resources socket requires it.
FROM python:3.11.10-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /opt/gpulens
COPY pyproject.toml README.md ./
COPY gpulens gpulens
COPY exporter exporter
COPY analyzer analyzer
COPY dashboards dashboards
COPY alerts alerts
RUN pip install --no-compile . && rm -rf /opt/gpulens/build \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpulens

USER 10001:10001
EXPOSE 9848 9849
ENTRYPOINT ["gpulens"]
CMD ["exporter", "--help"]
