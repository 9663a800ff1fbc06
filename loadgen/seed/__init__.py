"""The seed: loads the lab's files into GridFS, PostgreSQL and the files
volume, and writes the manifest bench checks every answer against
(loader.py). Its own image (loadgen/seed.Dockerfile) runs `python -m seed`."""
