"""lingprobe's exception (apart, so that importing the package costs nothing)."""


class LingprobeError(RuntimeError):
    """A lingprobe C ABI call failed; carries the status code and lingprobe's message."""

    def __init__(self, status, message):
        super().__init__(f"lingprobe: {message} (status {status})")
        self.status = status


def missing_run_directory(path):
    """The CLI's one line for a run directory that is not there (its C++ commands' sink::run_directory_error)."""
    return f"'{path}' does not exist: give a run directory OUT/{{run_id}}, or OUT/latest for the newest launch"
