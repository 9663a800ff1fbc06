"""bench's progress lines, on stdout as it goes."""


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)
