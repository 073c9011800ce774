"""The numbers of the message types on the wire (``protocol`` declares the messages)."""
from enum import IntEnum


class AdminOp(IntEnum):
    """An administrator's operation on the driver (a client's admin calls); each travels
    as a message type of its own, with the same number."""
    PING = 40
    EXECUTOR_IDS = 41
    TOTAL_CORES = 42
    STATUS = 43
    IS_EXECUTOR_ACTIVE = 44
    DECOMMISSION_EXECUTORS = 45
    DECOMMISSION_EXECUTORS_ON_HOST = 46
    REQUEST_TOTAL_EXECUTORS = 47
    REQUEST_EXECUTORS = 48
    KILL_EXECUTORS = 49
    KILL_EXECUTORS_ON_HOST = 50


class MsgType(IntEnum):
    # executor -> driver
    REGISTER_EXECUTOR = 1
    STATUS_UPDATES = 2
    HEARTBEAT = 3
    REMOVE_EXECUTOR = 4
    ATTACH_RELIEF = 5
    EXECUTOR_HELLO = 6
    GET_DATA = 7
    RESULT_DATA = 8
    # driver -> executor
    REGISTERED_EXECUTOR = 10
    REGISTER_EXECUTOR_FAILED = 11
    LAUNCH_TASKS = 12
    KILL_TASK = 13
    STOP_EXECUTOR = 14
    SHUTDOWN = 15
    HEARTBEAT_ACK = 16
    DECOMMISSION_EXECUTOR = 17
    # driver -> executor or client: "are you there?" (ignored; a send to a peer that is gone fails)
    PROBE = 18
    # driver -> executor
    RETURN_TASKS = 19
    # client -> driver
    CLIENT_HELLO = 20
    SUBMIT_TASKS = 21
    CANCEL_TASKS = 22
    STOP_EXECUTORS = 24
    CLIENT_GOODBYE = 25
    # client -> driver (functions it no longer needs) and driver -> executor (drop them)
    FORGET_FUNCTIONS = 26
    # client -> driver, answered by an AdminReply
    CANCEL_QUEUED_TASKS = 27
    # the client has taken results off its connection: the driver may send more
    RESULTS_TAKEN = 28
    # client -> driver: data for its tasks or a broadcast; and what it no longer needs
    PUT_DATA = 29
    FORGET_DATA = 23
    # client -> driver: the options of some tasks of its next SubmitTasks
    TASK_PLACEMENT = 36
    # driver -> client
    CLIENT_WELCOME = 30
    TASK_RESULTS = 31
    ADMIN_REPLY = 32
    # driver -> executor, client
    DATA = 33
    TASK_DATA = 34
    DATA_STORED = 35
    # client -> driver: the administrator's operations, answered by an AdminReply
    ADMIN_PING = AdminOp.PING
    ADMIN_EXECUTOR_IDS = AdminOp.EXECUTOR_IDS
    ADMIN_TOTAL_CORES = AdminOp.TOTAL_CORES
    ADMIN_STATUS = AdminOp.STATUS
    ADMIN_IS_EXECUTOR_ACTIVE = AdminOp.IS_EXECUTOR_ACTIVE
    ADMIN_DECOMMISSION_EXECUTORS = AdminOp.DECOMMISSION_EXECUTORS
    ADMIN_DECOMMISSION_EXECUTORS_ON_HOST = AdminOp.DECOMMISSION_EXECUTORS_ON_HOST
    ADMIN_REQUEST_TOTAL_EXECUTORS = AdminOp.REQUEST_TOTAL_EXECUTORS
    ADMIN_REQUEST_EXECUTORS = AdminOp.REQUEST_EXECUTORS
    ADMIN_KILL_EXECUTORS = AdminOp.KILL_EXECUTORS
    ADMIN_KILL_EXECUTORS_ON_HOST = AdminOp.KILL_EXECUTORS_ON_HOST
