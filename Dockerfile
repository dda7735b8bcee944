# queuemgr's image: the package and its console script, nothing else.
# Built by docker-compose.yml; `queuemgr serve` is the default command there.
FROM python:3.11.10-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY queuemgr ./queuemgr
COPY migrations ./migrations
RUN pip install . && useradd --system --uid 10001 --home-dir /app queuemgr

USER 10001
# 8080: /metrics, /healthz, /readyz; 9443: the admission webhook (HTTPS) when enabled.
EXPOSE 8080 9443
ENTRYPOINT ["queuemgr"]
CMD ["serve"]
