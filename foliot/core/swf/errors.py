"""The AWS faults the SWF face answers with, in the JSON 1.0 protocol's error shape.

SwfFault                               HTTP 400, body {"__type": "<namespace>#<code>", "message"}
├── modelled faults (botocore raises the client's exception class of the same name)
│   UnknownResourceFault, DomainAlreadyExistsFault, DomainDeprecatedFault,
│   TypeAlreadyExistsFault, TypeDeprecatedFault, TypeNotDeprecatedFault,
│   WorkflowExecutionAlreadyStartedFault, DefaultUndefinedFault, TooManyTagsFault,
│   LimitExceededFault, OperationNotPermittedFault
└── protocol errors (botocore raises ClientError with this code)
    ValidationException, SerializationException, UnknownOperationException,
    MissingAuthenticationTokenException, IncompleteSignatureException,
    UnrecognizedClientException, InvalidSignatureException, NotImplemented (501),
    InternalFailure (500), ServiceUnavailable (503)

botocore reads the code after the last `#` of `__type`, so the namespaces are AWS's own.
"""

from __future__ import annotations

from typing import Any

from ..errors import FoliotError

MODEL_NAMESPACE = "com.amazonaws.swf.base.model"
CORAL_SERVICE = "com.amazon.coral.service"
CORAL_VALIDATE = "com.amazon.coral.validate"


class SwfFault(FoliotError):
    """An SWF answer other than success. `code` is the fault's name, `status` its HTTP status."""

    code = "InternalFailure"
    namespace = CORAL_SERVICE
    status = 400

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def body(self) -> dict[str, Any]:
        return {"__type": f"{self.namespace}#{self.code}", "message": self.message}


def _fault(code: str, namespace: str = MODEL_NAMESPACE, status: int = 400) -> type[SwfFault]:
    return type(code, (SwfFault,), {"code": code, "namespace": namespace, "status": status})


UnknownResourceFault = _fault("UnknownResourceFault")
DomainAlreadyExistsFault = _fault("DomainAlreadyExistsFault")
DomainDeprecatedFault = _fault("DomainDeprecatedFault")
TypeAlreadyExistsFault = _fault("TypeAlreadyExistsFault")
TypeDeprecatedFault = _fault("TypeDeprecatedFault")
TypeNotDeprecatedFault = _fault("TypeNotDeprecatedFault")
WorkflowExecutionAlreadyStartedFault = _fault("WorkflowExecutionAlreadyStartedFault")
DefaultUndefinedFault = _fault("DefaultUndefinedFault")
TooManyTagsFault = _fault("TooManyTagsFault")
LimitExceededFault = _fault("LimitExceededFault")
OperationNotPermittedFault = _fault("OperationNotPermittedFault")

ValidationException = _fault("ValidationException", CORAL_VALIDATE)
SerializationException = _fault("SerializationException", CORAL_SERVICE)
UnknownOperationException = _fault("UnknownOperationException", CORAL_SERVICE)
MissingAuthenticationTokenException = _fault("MissingAuthenticationTokenException", CORAL_SERVICE)
IncompleteSignatureException = _fault("IncompleteSignatureException", CORAL_SERVICE)
UnrecognizedClientException = _fault("UnrecognizedClientException", CORAL_SERVICE)
InvalidSignatureException = _fault("InvalidSignatureException", CORAL_SERVICE)
NotImplementedFault = _fault("NotImplemented", CORAL_SERVICE, 501)
InternalFailure = _fault("InternalFailure", CORAL_SERVICE, 500)
ServiceUnavailable = _fault("ServiceUnavailable", CORAL_SERVICE, 503)
