# The container worker: the same lambdas/ code as the functions, run by `python -m worker_tier worker`.
# Built from the repository root at deploy time (cdk deploy); synth needs no Docker.
# BASE_IMAGE comes from the container_base_image setting. Pin it by digest
# (python:3.13-slim@sha256:<digest>) so every rebuild runs on the same image; the default is a tag.
ARG BASE_IMAGE=public.ecr.aws/docker/library/python:3.13-slim
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY docker/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt && useradd --create-home worker
COPY lambdas/ /app/
USER worker
ENTRYPOINT ["python", "-m", "worker_tier"]
CMD ["worker"]
