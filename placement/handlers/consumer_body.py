"""One consumer's allocations from a request body, as the object layer
writes them: shared by PUT/POST /allocations and POST /reshaper."""

from placement import versions
from placement.objects import consumer as consumer_obj


def _list_form(allocations):
    """The list form (before 1.12) as {provider uuid: resources}; a provider
    listed twice keeps its last entry."""
    return {
        item["resource_provider"]["uuid"]: item["resources"] for item in allocations
    }


def consumer_write(conf, consumer_uuid, entry, version):
    """A ConsumerWrite from one consumer's body (PUT body, POST entry,
    reshaper entry) at ``version``; ``conf`` the app's configuration."""
    if version >= versions.DICT_ALLOCATIONS:
        allocations = {
            rp: alloc["resources"] for rp, alloc in entry["allocations"].items()
        }
    else:
        allocations = _list_form(entry["allocations"])
    # Before: the configured ids of an incomplete consumer.
    if version >= versions.OWNER_REQUIRED:
        project_id, user_id = entry["project_id"], entry["user_id"]
    else:
        project_id = conf.placement.incomplete_consumer_project_id
        user_id = conf.placement.incomplete_consumer_user_id
    return consumer_obj.ConsumerWrite(
        uuid=consumer_uuid,
        project_id=project_id,
        user_id=user_id,
        consumer_type=(
            entry["consumer_type"] if version >= versions.CONSUMER_TYPES else None
        ),
        generation=entry.get("consumer_generation"),
        allocations=allocations,
    )
