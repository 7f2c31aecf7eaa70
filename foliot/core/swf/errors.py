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
└── the HTTP layer's refusals of `POST /`, in AWS's shape (`refusal`): RequestEntityTooLargeException
    (413), RequestTimeoutException (408), ThrottlingException (429), AccessDeniedException (403),
    and the protocol errors above with the HTTP layer's status

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
RequestEntityTooLargeException = _fault("RequestEntityTooLargeException", CORAL_SERVICE, 413)
RequestTimeoutException = _fault("RequestTimeoutException", CORAL_SERVICE, 408)
ThrottlingException = _fault("ThrottlingException", CORAL_SERVICE, 429)
AccessDeniedException = _fault("AccessDeniedException", CORAL_SERVICE, 403)

# The HTTP layer's refusals (before the SWF face reads the request), by status, as AWS faults.
_BY_STATUS: dict[int, type[SwfFault]] = {
    400: SerializationException,  # the request's framing: two lengths, a NUL, a malformed body
    401: IncompleteSignatureException,  # two Authorization headers
    403: AccessDeniedException,
    408: RequestTimeoutException,
    413: RequestEntityTooLargeException,
    415: SerializationException,  # a body of another media type or content encoding
    429: ThrottlingException,
    503: ServiceUnavailable,
}


def refusal(status: int, message: str) -> SwfFault:
    """The AWS fault for a refusal of `POST /` the HTTP layer made with `status`: the SWF
    endpoint answers nothing but AWS faults, so SDKs raise their own errors. The status stays
    the HTTP layer's."""
    cls = _BY_STATUS.get(status) or (InternalFailure if status >= 500 else SerializationException)
    fault = cls(message)
    fault.status = status
    return fault
