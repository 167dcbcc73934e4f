"""Default policy rules: upstream's names, check strings and scopes
(doc/api.md "Policy")."""

from oslo_policy import policy

PROJECT = ["project"]

_DEPRECATED_ADMIN = dict(
    check_str="role:admin",
    deprecated_reason=(
        "Placement moved to secure-RBAC defaults (admin, service and reader roles "
        "with project scope)."
    ),
    deprecated_since="7.0.0",
)

BASE_RULES = [
    policy.RuleDefault(
        "admin_api",
        "role:admin",
        description="Default rule for most placement APIs.",
        scope_types=PROJECT,
    ),
    policy.RuleDefault(
        "service_api",
        "role:service",
        description="Default rule for service-to-service APIs.",
        scope_types=PROJECT,
        deprecated_rule=policy.DeprecatedRule("service_api", **_DEPRECATED_ADMIN),
    ),
    policy.RuleDefault(
        "admin_or_service_api",
        "role:admin or role:service",
        description="Default rule for most placement APIs.",
        scope_types=PROJECT,
        deprecated_rule=policy.DeprecatedRule(
            "admin_or_service_api", **_DEPRECATED_ADMIN
        ),
    ),
    policy.RuleDefault(
        "project_reader_api",
        "role:reader and project_id:%(project_id)s",
        description="Default rule for project level reader APIs.",
        deprecated_rule=policy.DeprecatedRule(
            "project_reader_api", **_DEPRECATED_ADMIN
        ),
    ),
    policy.RuleDefault(
        "admin_or_project_reader_or_service_api",
        "role:admin or rule:project_reader_api or role:service",
        description="Default rule for project level reader APIs.",
        scope_types=PROJECT,
        deprecated_rule=policy.DeprecatedRule(
            "admin_or_project_reader_or_service_api", **_DEPRECATED_ADMIN
        ),
    ),
]

ADMIN_OR_SERVICE = "rule:admin_or_service_api"

# (rule, check string, method, path, description)
_API = [
    (
        "resource_providers:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers",
        "List resource providers.",
    ),
    (
        "resource_providers:create",
        ADMIN_OR_SERVICE,
        "POST",
        "/resource_providers",
        "Create resource provider.",
    ),
    (
        "resource_providers:show",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}",
        "Show resource provider.",
    ),
    (
        "resource_providers:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/resource_providers/{uuid}",
        "Update resource provider.",
    ),
    (
        "resource_providers:delete",
        ADMIN_OR_SERVICE,
        "DELETE",
        "/resource_providers/{uuid}",
        "Delete resource provider.",
    ),
    (
        "resource_classes:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_classes",
        "List resource classes.",
    ),
    (
        "resource_classes:create",
        ADMIN_OR_SERVICE,
        "POST",
        "/resource_classes",
        "Create resource class.",
    ),
    (
        "resource_classes:show",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_classes/{name}",
        "Show resource class.",
    ),
    (
        "resource_classes:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/resource_classes/{name}",
        "Update resource class.",
    ),
    (
        "resource_classes:delete",
        ADMIN_OR_SERVICE,
        "DELETE",
        "/resource_classes/{name}",
        "Delete resource class.",
    ),
    (
        "resource_providers:inventories:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/inventories",
        "List resource provider inventories.",
    ),
    (
        "resource_providers:inventories:create",
        ADMIN_OR_SERVICE,
        "POST",
        "/resource_providers/{uuid}/inventories",
        "Create one resource provider inventory.",
    ),
    (
        "resource_providers:inventories:show",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/inventories/{resource_class}",
        "Show resource provider inventory.",
    ),
    (
        "resource_providers:inventories:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/resource_providers/{uuid}/inventories",
        "Update resource provider inventories.",
    ),
    (
        "resource_providers:inventories:delete",
        ADMIN_OR_SERVICE,
        "DELETE",
        "/resource_providers/{uuid}/inventories",
        "Delete resource provider inventories.",
    ),
    (
        "resource_providers:aggregates:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/aggregates",
        "List resource provider aggregates.",
    ),
    (
        "resource_providers:aggregates:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/resource_providers/{uuid}/aggregates",
        "Update resource provider aggregates.",
    ),
    (
        "resource_providers:usages",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/usages",
        "List resource provider usages.",
    ),
    (
        "usages",
        "rule:admin_or_project_reader_or_service_api",
        "GET",
        "/usages",
        "List total resource usages for a given project.",
    ),
    ("traits:list", ADMIN_OR_SERVICE, "GET", "/traits", "List traits."),
    ("traits:show", ADMIN_OR_SERVICE, "GET", "/traits/{name}", "Show trait."),
    ("traits:update", ADMIN_OR_SERVICE, "PUT", "/traits/{name}", "Update trait."),
    ("traits:delete", ADMIN_OR_SERVICE, "DELETE", "/traits/{name}", "Delete trait."),
    (
        "resource_providers:traits:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/traits",
        "List resource provider traits.",
    ),
    (
        "resource_providers:traits:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/resource_providers/{uuid}/traits",
        "Update resource provider traits.",
    ),
    (
        "resource_providers:traits:delete",
        ADMIN_OR_SERVICE,
        "DELETE",
        "/resource_providers/{uuid}/traits",
        "Delete resource provider traits.",
    ),
    (
        "allocations:manage",
        ADMIN_OR_SERVICE,
        "POST",
        "/allocations",
        "Manage allocations.",
    ),
    (
        "allocations:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/allocations/{consumer_uuid}",
        "List allocations.",
    ),
    (
        "allocations:update",
        ADMIN_OR_SERVICE,
        "PUT",
        "/allocations/{consumer_uuid}",
        "Update allocations.",
    ),
    (
        "allocations:delete",
        ADMIN_OR_SERVICE,
        "DELETE",
        "/allocations/{consumer_uuid}",
        "Delete allocations.",
    ),
    (
        "resource_providers:allocations:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/resource_providers/{uuid}/allocations",
        "List resource provider allocations.",
    ),
    (
        "allocation_candidates:list",
        ADMIN_OR_SERVICE,
        "GET",
        "/allocation_candidates",
        "List allocation candidates.",
    ),
    (
        "reshaper:reshape",
        "rule:service_api",
        "POST",
        "/reshaper",
        "Reshape Inventory and Allocations.",
    ),
    (
        "maintenance:audit",
        "rule:admin_api",
        "GET",
        "/maintenance/audit",
        "Audit the database: what is wrong in it and how to fix it (read-only).",
    ),
    (
        "maintenance:drain",
        "rule:admin_api",
        "GET",
        "/maintenance/drain",
        "Plan where the consumers of some trees would go if they were emptied.",
    ),
]

API_RULES = [
    policy.DocumentedRuleDefault(
        "placement:" + name,
        check,
        description,
        [{"method": method, "path": path}],
        scope_types=PROJECT,
    )
    for name, check, method, path, description in _API
]


def list_rules():
    return BASE_RULES + API_RULES
