//! Cloud metadata services: the addresses and names no request may reach and
//! no operator setting may open. One list, read by the address guard
//! (`gatehouse-egress`) and by configuration (which refuses an egress range
//! that contains one of them).

/// Cloud metadata services' addresses: refused always, never openable.
pub const METADATA_ADDRESSES: &[(&str, &str)] = &[
    ("169.254.169.254", "169.254.169.254 cloud instance metadata (AWS, GCP, Azure, OCI, ...)"),
    ("169.254.170.2", "169.254.170.2 AWS ECS task metadata"),
    ("169.254.169.123", "169.254.169.123 AWS time sync"),
    ("fd00:ec2::254", "fd00:ec2::254 AWS instance metadata (IPv6)"),
    ("fd00:ec2::23", "fd00:ec2::23 AWS DNS resolver (IPv6)"),
    ("fd20:ce::254", "fd20:ce::254 GCP instance metadata (IPv6)"),
    ("168.63.129.16", "168.63.129.16 Azure WireServer / metadata"),
    ("100.100.100.200", "100.100.100.200 Alibaba Cloud instance metadata"),
];

/// Host names of metadata services, refused by name before any lookup.
pub const METADATA_HOST_NAMES: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
    "metadata.azure.com",
    "metadata.tencentyun.com",
    "metadata.platformequinix.com",
];
