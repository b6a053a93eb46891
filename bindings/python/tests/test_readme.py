"""The README's Python blocks work as written."""

import re
from pathlib import Path

import fairshm

README = Path(__file__).resolve().parents[3] / "README.md"


def test_the_readme_python_blocks_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert blocks, "the README has a Python quick start"
    try:
        for code in blocks:
            scope = {"__name__": "readme"}
            exec(compile(code, "README.md", "exec"), scope)
            # The middleware line a user pastes: the app it makes serves requests.
            app = scope.get("app")
            if app is not None:
                seen = {}
                body = app({"HTTP_X_TENANT": "acme"}, lambda s, h, e=None: seen.update(status=s))
                assert b"".join(body) == b"hello" and seen["status"] == "200 OK"
                body.close()
                assert scope["table"].stats()["pools"][0]["in_use"] == 0
            scope["table"].close()
    finally:
        try:
            fairshm.Table.unlink("myapp-fairshm")
        except fairshm.NotFound:
            pass
    assert capsys.readouterr().out.strip().endswith("0")
