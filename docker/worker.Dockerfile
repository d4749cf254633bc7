# The container worker: the same lambdas/ code as the functions, run by `python -m worker_tier worker`.
# Built from the repository root at deploy time (cdk deploy); synth needs no Docker.
FROM public.ecr.aws/docker/library/python:3.13-slim
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /app
COPY docker/requirements.txt /tmp/requirements.txt
RUN pip install --no-cache-dir -r /tmp/requirements.txt && useradd --create-home worker
COPY lambdas/ /app/
USER worker
ENTRYPOINT ["python", "-m", "worker_tier"]
CMD ["worker"]
