"""lingprobe's exception (apart, so that importing the package costs nothing)."""


class LingprobeError(RuntimeError):
    """A lingprobe C ABI call failed; carries the status code and lingprobe's message."""

    def __init__(self, status, message):
        super().__init__(f"lingprobe: {message} (status {status})")
        self.status = status
