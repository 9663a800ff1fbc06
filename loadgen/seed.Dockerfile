# One-shot: loads the benchmark files into GridFS, onto the files volume and,
# when POSTGRES_URL is set, into PostgreSQL. Built from loadgen/, bench's
# context, for what both read alike (labfiles/: the FILE_SIZES and FILE_SET
# parsers, the PostgreSQL layout); only the seed's code and drivers go in,
# none of bench's tools.
ARG PYTHON_IMAGE=python:3.12-slim
FROM ${PYTHON_IMAGE}
WORKDIR /app
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY labfiles labfiles
COPY seed seed
ENV PYTHONUNBUFFERED=1
# Not root, as the Python serving paths. The files volume takes this
# directory's owner when Docker creates it (an empty named volume is
# initialised from the image's mount point), so the seed can write it.
RUN mkdir -p /data/files && chown 10001:10001 /data/files
USER 10001:10001
CMD ["python", "-m", "seed"]
