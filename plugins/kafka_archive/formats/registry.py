"""Values in the Confluent wire format (a magic byte, the schema id, the payload), read
with confluent-kafka's own Schema Registry client and deserializers: `avro` (fastavro),
`protobuf` and `json_schema`. No wire parsing here: the deserializers read the header,
fetch the writer's schema by its id and decode; the client caches each schema, so a
process asks the registry once per schema id it meets.

A value becomes a dict of its fields (`Registered`, which also names its schema id and
gives the writer's schema as Arrow, formats.schemas, for a typed table): Avro's as
fastavro gives them (logical types as datetime, date, Decimal, UUID text), JSON Schema's
as JSON, Protobuf's through protobuf's JSON mapping (a Timestamp as RFC 3339 text, a
scalar at its default as that default). Protobuf needs no generated class: the message
type is built from the descriptor the registry holds for the id.

What fails is told apart (`decode`): a value this cannot read (no magic byte, a corrupt
payload, a schema id the registry does not know) is the message's problem, a ParseError
that names the schema id and sends it to the dead letters; a registry that does not
answer, refuses the credentials or fails (5xx) is the run's, a TransientError.
"""

from __future__ import annotations

import base64
import io
import json
from typing import Any, Callable, Mapping

from kafka_archive.errors import TransientError
from kafka_archive.formats.parsers import ParseError

KINDS = ("avro", "protobuf", "json_schema")
STRATEGIES = ("topic", "record", "topic_record")  # the subject naming strategy
_SCHEMA_TYPE = {"avro": "AVRO", "protobuf": "PROTOBUF", "json_schema": "JSON"}


class Registered(dict):
    """A decoded value's fields, with the id of the schema it was written with and that
    schema as Arrow (`schema`, read from the registry's cache once per id: a files group
    never asks it). A schema no table can hold raises ParseError naming the id."""

    def __init__(self, fields: dict, schema_id: str, schema: Callable[[], Any],
                 native: bool = False):
        """native: the values are in Arrow's own Python types already (fastavro's)."""
        super().__init__(fields)
        self.schema_id, self._schema, self.native = schema_id, schema, native

    @property
    def schema(self):
        from kafka_archive.formats.schemas import UnsupportedSchema

        try:
            return self._schema()
        except UnsupportedSchema as exc:
            raise ParseError(f"schema id {self.schema_id} has no table shape: {exc}") from None

    def with_key(self, key: Registered) -> Registered:
        """The value's fields and the decoded key (Decoder of part `key`) as field `key`."""
        if "key" in self:
            raise ParseError(f"schema id {self.schema_id} has a field named key, the column "
                             "the decoded key takes")
        import pyarrow as pa

        return Registered({**self, **key}, f"{self.schema_id} (key: schema id {key.schema_id})",
                          lambda: pa.schema([*self.schema, *key.schema]),
                          self.native and key.native)


class Decoder:
    """decode(value, topic) -> the value's fields, for one kind and one registry."""

    def __init__(self, kind: str, settings: Mapping[str, Any], strategy: str = "topic",
                 client=None, part: str = "value"):
        """client: one made already (its settings then unused), e.g. confluent's mock;
        part: what it decodes, the message's `value` or its `key` (the `<topic>-key`
        subject; whatever its schema's type, it is one field, `key`)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        if strategy not in STRATEGIES:
            raise ValueError(f"subject_name_strategy must be one of {', '.join(STRATEGIES)}, "
                             f"got {strategy!r}")
        try:  # the extras' modules: a missing install is the deployment's, not a message's
            import authlib  # noqa: F401 (the registry client's)
            import fastavro  # noqa: F401
            import google.protobuf  # noqa: F401
            import jsonschema  # noqa: F401
        except ImportError as exc:
            raise ValueError(f"parser {kind} needs confluent-kafka's Schema Registry extras: "
                             f"pip install 'kafka-archive[registry]' ({exc})") from None
        self.kind, self.settings, self.strategy, self.part = kind, dict(settings), strategy, part
        self._client = client
        self._read: Callable[[bytes, Any], Any] | None = None
        # (schema id, message indexes) -> (descriptor, deserializer)
        self._protobuf: dict[tuple, Any] = {}
        self._arrow: dict[tuple, Any] = {}  # the same -> the writer's schema as Arrow
        # (schema id, topic) -> why it is not the topic's (None: a version of its subject)
        self._foreign: dict[tuple[int, str], str | None] = {}

    @property
    def client(self):
        from confluent_kafka.schema_registry import SchemaRegistryClient

        if self._client is None:
            if not self.settings.get("url"):
                raise TransientError("no Schema Registry is configured (schema_registry: in "
                                     "the config, or its Airflow connection)")
            self._client = SchemaRegistryClient(dict(self.settings))
        return self._client

    def decode(self, value: bytes, topic: str) -> Registered:
        """The value's fields by the writer's schema (the topic names its subject); a
        key's: the one field `key`."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import MessageField, SerializationContext

        field = MessageField.KEY if self.part == "key" else MessageField.VALUE
        # Avro by the id alone, without a context: the value as its producer wrote it, by
        # the writer's schema, with no data-contract rules or migration to the subject's
        # latest version (which need the subject, and cost confluent-kafka a walk of the
        # schema per message: half the decoding). JSON's deserializer needs the context.
        context = None if self.kind == "avro" else SerializationContext(topic, field)
        try:
            decoded = self._deserializer()(value, context)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:  # the id is not there: this message's problem
                raise ParseError(f"schema id {self.schema_id(value)} is not in the Schema "
                                 f"Registry ({exc.error_message})") from None
            raise TransientError(f"the Schema Registry at {self.settings['url']} answered "
                                 f"{exc.http_status_code} for schema id "
                                 f"{self.schema_id(value)}: {exc.error_message}") from exc
        except TransientError:
            raise
        except Exception as exc:  # noqa: BLE001 (each library's own decoding errors)
            if _unreachable(exc):
                raise TransientError(f"the Schema Registry at {self.settings['url']} does "
                                     f"not answer: {exc}") from exc
            raise ParseError(f"the {self.part} is not {self.kind} of schema id "
                             f"{self.schema_id(value)}: {type(exc).__name__}: {exc}") from None
        if self.kind == "protobuf":
            from google.protobuf.json_format import MessageToDict

            decoded = MessageToDict(decoded, preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True)
        key = self._key(value)  # the header read once more (the id, for reasons and types)
        schema_id = str(key[0]) if key[0] is not None else self.schema_id(value)
        if key[0] is not None:
            foreign = self._foreign.get((key[0], topic), False)
            if foreign is False:
                foreign = self._foreign[key[0], topic] = self._not_the_topics(key, topic, field,
                                                                              context)
            if foreign:
                raise ParseError(foreign)
        if self.part == "key":
            return Registered({"key": decoded}, schema_id,
                              lambda: self._writer_schema(key, context), self.kind == "avro")
        if not isinstance(decoded, dict):
            raise ParseError(f"the value of schema id {schema_id} is "
                             f"{type(decoded).__name__}, not a record of fields")
        return Registered(decoded, schema_id, lambda: self._writer_schema(key, context),
                          self.kind == "avro")

    def _not_the_topics(self, key: tuple, topic: str, field, context) -> str | None:
        """Why schema id key[0] is no version of the subject the topic's strategy names
        (a producer that wrote another topic's schema: its values decode, but they are
        not this topic's records), or None: asked once per schema id and topic. A record
        strategy's subject of a schema without a name (a primitive key) is not checked."""
        from confluent_kafka.schema_registry.error import SchemaRegistryError
        from confluent_kafka.serialization import SerializationContext

        schema = self._registered(key, context)
        subject = _strategy(self.strategy)(SerializationContext(topic, field),
                                           self._record_name(key, schema))
        if subject is None:
            return None
        try:
            self.client.lookup_schema(subject, schema)
        except SchemaRegistryError as exc:
            if exc.http_status_code != 404:
                raise TransientError(f"the Schema Registry at {self.settings['url']} answered "
                                     f"{exc.http_status_code} for subject {subject}: "
                                     f"{exc.error_message}") from exc
            return (f"schema id {key[0]} is not a version of subject {subject} (the "
                    f"{self.strategy} subject name strategy's for topic {topic}): a "
                    f"{self.part} of another subject")
        except Exception as exc:
            if _unreachable(exc):
                raise TransientError(f"the Schema Registry at {self.settings['url']} does "
                                     f"not answer: {exc}") from exc
            raise
        return None

    def _record_name(self, key: tuple, schema) -> str | None:
        """The name a record subject name strategy gives the schema's subject."""
        if self.strategy == "topic":
            return None
        if self.kind == "protobuf":
            return self._protobuf[key][0].full_name
        parsed = json.loads(schema.schema_str)
        if not isinstance(parsed, dict):  # a primitive ("string"): no record name
            return None
        if self.kind == "json_schema":
            return parsed.get("title")
        name = parsed.get("name", "")
        return name if "." in name or not parsed.get("namespace") else \
            f"{parsed['namespace']}.{name}"

    def _registered(self, key: tuple, context):
        """The registry's Schema of a schema id, asked as the deserializer asked it (the
        client caches by subject and id: asked otherwise, it would ask the registry again)."""
        if self.kind == "protobuf":
            return self.client.get_schema(key[0])
        return self.client.get_schema(key[0], context and _strategy(self.strategy)(context, None))

    def _writer_schema(self, key: tuple, context):
        """The writer's schema of a (schema id, message indexes) as Arrow, made once."""
        import pyarrow as pa

        from kafka_archive.formats import schemas

        if key not in self._arrow:
            if self.kind == "protobuf":
                made = pa.struct(list(schemas.protobuf_arrow(self._protobuf[key][0])))
            else:
                text = self._registered(key, context).schema_str
                made = (schemas.avro_type if self.kind == "avro"
                        else schemas.json_schema_type)(text)
            if self.part == "key":
                self._arrow[key] = pa.schema([pa.field("key", made)])
            elif not pa.types.is_struct(made):
                raise schemas.UnsupportedSchema(f"the value's schema is {made}, not a record")
            else:
                self._arrow[key] = pa.schema(list(made))
        return self._arrow[key]

    def _key(self, value: bytes) -> tuple:
        from confluent_kafka.schema_registry.common.serde import SchemaId

        header = SchemaId(_SCHEMA_TYPE[self.kind])
        header.from_bytes(io.BytesIO(value))
        return header.id, tuple(header.message_indexes or (0,))

    def schema_id(self, value: bytes) -> str:
        """The value's schema id as its header says, for reasons; '?' without a header."""
        from confluent_kafka.schema_registry.common.serde import SchemaId

        found = SchemaId(_SCHEMA_TYPE[self.kind])
        try:
            found.from_bytes(io.BytesIO(value))
        except Exception:  # noqa: BLE001 (no header: the reason says so)
            return "? (no Confluent wire-format header)"
        return str(found.id if found.id is not None else found.guid)

    def _deserializer(self) -> Callable[[bytes, Any], Any]:
        if self._read is not None:
            return self._read
        conf = {"subject.name.strategy": _strategy(self.strategy)}
        if self.kind == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer

            self._read = AvroDeserializer(self.client, conf=conf)
        elif self.kind == "json_schema":
            from confluent_kafka.schema_registry.json_schema import JSONDeserializer

            self._read = JSONDeserializer(None, conf=conf, schema_registry_client=self.client)
        else:
            self._read = self._protobuf_read
        return self._read

    def _protobuf_read(self, value: bytes, context) -> Any:
        """Protobuf's deserializer for the writer's message type, made once per schema id
        and message from the descriptor the registry holds (no generated class needed).
        It is given no registry: it would ask for the schema again, in the `serialized`
        form, which Apicurio 3.3 fails to give (500) for a descriptor registered as such."""
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        key = self._key(value)
        if key not in self._protobuf:
            message = _message_class(self.client, key[0], key[1])
            self._protobuf[key] = (message.DESCRIPTOR, ProtobufDeserializer(
                message, {"use.deprecated.format": False}))
        return self._protobuf[key][1](value, context)


def reachable(settings: Mapping[str, Any]) -> str:
    """The registry answers with these settings (preflight): its URL and how many
    subjects it holds; TransientError naming the URL when it does not answer, fails or
    refuses the credentials."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    url = settings.get("url")
    if not url:
        raise TransientError("no Schema Registry is configured (schema_registry: in the "
                             "config, or its Airflow connection)")
    try:
        subjects = SchemaRegistryClient({**settings, "max.retries": 0}).get_subjects()
    except SchemaRegistryError as exc:
        raise TransientError(f"the Schema Registry at {url} answered {exc.http_status_code}: "
                             f"{exc.error_message}") from None
    except Exception as exc:  # noqa: BLE001 (httpx's, ssl's: the reason is in the text)
        raise TransientError(f"the Schema Registry at {url} does not answer: {exc}") from None
    return f"{url}: {len(subjects)} subjects"


def _message_class(client, schema_id: int, indexes: tuple[int, ...]):
    """The message type the registry's descriptor for this id names by its indexes."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    _add_well_known(pool)

    def add(schema, name: str, again) -> None:
        for reference in schema.references or ():
            add(client.get_version(reference.subject, reference.version).schema, reference.name,
                lambda r=reference: client.get_version(r.subject, r.version,
                                                       fmt="serialized").schema)
        proto = _descriptor(schema) or _descriptor(again())
        if proto is None:
            raise ValueError(f"the registry gives no descriptor for schema {name}")
        proto.name = name
        try:
            pool.Add(proto)
        except TypeError:  # added already (a file two references share)
            pass

    main = f"schema-{schema_id}.proto"
    add(client.get_schema(schema_id), main,
        lambda: client.get_schema(schema_id, fmt="serialized"))
    found = pool.FindFileByName(main)
    descriptor = found.message_types_by_name[list(found.message_types_by_name)[indexes[0]]]
    for i in indexes[1:]:
        descriptor = descriptor.nested_types[i]
    return message_factory.GetMessageClass(descriptor)


def _descriptor(schema):
    """The FileDescriptorProto a schema holds as base64 (how confluent-kafka registers
    one, and how Confluent serves one asked for `serialized`); None for .proto text."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    try:
        return descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(schema.schema_str, validate=True))
    except (ValueError, DecodeError):
        return None


def _add_well_known(pool) -> None:
    from google.protobuf import (any_pb2, duration_pb2, empty_pb2, field_mask_pb2,
                                 struct_pb2, timestamp_pb2, wrappers_pb2)

    for module in (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2,
                   timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)


def _strategy(name: str):
    import confluent_kafka.schema_registry as sr

    return {"topic": sr.topic_subject_name_strategy, "record": sr.record_subject_name_strategy,
            "topic_record": sr.topic_record_subject_name_strategy}[name]


def _unreachable(exc: Exception) -> bool:
    """A connection that failed or timed out (httpx's errors), at any depth."""
    import httpx

    while exc is not None:
        if isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
