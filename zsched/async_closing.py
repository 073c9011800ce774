"""``async with`` for what closes by blocking: a client, a cluster."""


class AsyncClosing:
    """``async with`` support: entering returns the object; leaving runs its ``__exit__``
    in the event loop's default executor (a thread), so the loop goes on while it closes."""

    __slots__ = ()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        import asyncio  # here: a process that never awaits does not import it
        await asyncio.get_running_loop().run_in_executor(None, self.__exit__, *exc_info)
        return False
