# The container worker: the installed worker_tier runtime and the team's task code, staged by
# worker_tier_cdk.code (the build context holds worker_tier/, each task directory, this file,
# requirements.txt and app-requirements.txt: the task code's own requirements, TaskCode(requirements=...),
# installed in the same pip run as the runtime's pins so a conflict fails the build) and run by
# `python -m worker_tier worker`. Built at deploy time; synth needs no Docker.
# BASE_IMAGE comes from the container_base_image setting. Pin it by digest
# (python:3.14-slim@sha256:<digest>) so every rebuild runs on the same image; the default is a tag.
ARG BASE_IMAGE=public.ecr.aws/docker/library/python:3.14-slim
FROM ${BASE_IMAGE}
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY requirements.txt app-requirements.txt /tmp/
RUN pip install --no-cache-dir -r /tmp/requirements.txt -r /tmp/app-requirements.txt && useradd --create-home worker
COPY . /app/
USER worker
ENTRYPOINT ["python", "-m", "worker_tier"]
CMD ["worker"]
