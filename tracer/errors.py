"""The one error type of scene loading (a bad or unsupported scene, named by file and line), and
the warnings of a render that goes on with a stand-in: a plugin that gives the same image in
expectation, an intersection engine that gives the same image."""

__all__ = ["SceneError", "SceneNotice", "EngineNotice"]


class SceneError(ValueError):
    """A scene that cannot be loaded, as a one-line message.

    ``SceneError("unsupported bsdf type 'hair'", where="scene.xml:12")`` reads
    ``scene.xml:12: unsupported bsdf type 'hair'``; without ``where`` the message must name the
    file itself. Newlines are folded so that a CLI can print the error as one line.
    """

    def __init__(self, message: object, where: str | None = None) -> None:
        message = " ".join(str(message).split("\n"))
        if where:
            message = f"{where}: {message}"
        super().__init__(message)
        self.where = where


class SceneNotice(UserWarning):
    """A scene loads, but not exactly as written: e.g. an integrator we do not implement is
    rendered with one whose image is the same in expectation for this scene. One line, naming
    file and line."""


class EngineNotice(UserWarning):
    """An intersection engine that would serve cannot (e.g. Embree's extension was not built);
    the render goes on with another, which finds the same hits. One line, saying why."""
