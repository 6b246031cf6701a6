"""Shared by the stage-apart attacks: a stage's child holds the real reference of every earlier
stage (the course sources the grader sent it); it passes them on to the children of the other
stages, and takes from them the references it lacks, so that nothing written earns points."""
import json
import marshal
import os
import sys

NAME = "grpo-relay"


def sources() -> dict:
    """The course modules the grader sent this child (stubs for its own stage and later ones), as
    the finder keeps them: code, marshalled (hex)."""
    finder = next((f for f in sys.meta_path if hasattr(f, "codes")), None)
    return {name: marshal.dumps(code).hex() for name, code in finder.codes.items()} \
        if finder is not None else {}


def payload() -> bytes:
    return json.dumps(sources()).encode()


def take(data: bytes, namespace: dict) -> bool:
    """Define, in the submission's namespace, every graded function that a relayed source holds
    for real (not a stub); True when one was taken."""
    from course.registry import GRADED_FUNCTIONS

    try:
        relayed = json.loads(data)
    except ValueError:
        return False
    taken = False
    for source in relayed.values():
        found = {"__reference_called__": lambda name: None}
        try:
            exec(marshal.loads(bytes.fromhex(source)), found)
        except Exception:
            continue
        for name in GRADED_FUNCTIONS:
            function = found.get(name)
            if callable(function) and not hasattr(function, "__grader_stub__"):
                namespace[name] = function
                taken = True
    return taken


def files(folders=None) -> list:
    folders = folders or ("/tmp", "/dev/shm", "/var/tmp", os.path.expanduser("~"))
    return [os.path.join(folder, f"{NAME}.json") for folder in folders]


def write_files(paths) -> None:
    for path in paths:
        try:
            with open(path, "wb") as handle:
                handle.write(payload())
            os.chmod(path, 0o666)
        except OSError:
            pass


def read_files(paths, namespace: dict) -> bool:
    taken = False
    for path in paths:
        try:
            with open(path, "rb") as handle:
                taken = take(handle.read(), namespace) or taken
        except OSError:
            pass
    return taken


def daemon(serve) -> None:
    """Run `serve()` in a process that leaves this child's session and outlives it if it can."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            try:
                serve()
            finally:
                os._exit(0)
        os._exit(0)


def serve_socket(address) -> None:
    """Hand the payload to whoever connects, in a daemon (an abstract name when it starts with
    a NUL byte, else a path)."""
    import socket

    data = payload()

    def serve():
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(address)
        if not address.startswith("\0"):
            os.chmod(address, 0o777)
        server.listen(8)
        while True:
            connection, _ = server.accept()
            connection.sendall(data)
            connection.close()

    daemon(serve)


def read_socket(address, namespace: dict) -> bool:
    import socket

    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(2)
            client.connect(address)
            data = b""
            while chunk := client.recv(1 << 16):
                data += chunk
        return take(data, namespace)
    except OSError:
        return False
