//! Polaris privileges and its super-privilege table: which granted privileges satisfy a
//! desired one on the same securable.
//!
//! The table follows Apache Polaris's authorizer. Only privileges on catalogs,
//! namespaces, tables and views appear: principal and service privileges do not govern
//! data, and a grant document naming one is refused as an unknown privilege.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! privileges {
    ($($variant:ident => $name:literal,)*) => {
        /// A Polaris catalog privilege.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Privilege {
            $($variant,)*
        }

        impl Privilege {
            /// Every privilege hotgate knows, in declaration order.
            pub const ALL: &'static [Privilege] = &[$(Privilege::$variant,)*];

            /// The name as Polaris writes it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Privilege::$variant => $name,)*
                }
            }
        }

        impl FromStr for Privilege {
            type Err = UnknownPrivilege;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok(Privilege::$variant),)*
                    other => Err(UnknownPrivilege(other.to_owned())),
                }
            }
        }
    };
}

privileges! {
    CatalogManageAccess => "CATALOG_MANAGE_ACCESS",
    CatalogManageContent => "CATALOG_MANAGE_CONTENT",
    CatalogManageMetadata => "CATALOG_MANAGE_METADATA",
    CatalogReadProperties => "CATALOG_READ_PROPERTIES",
    CatalogWriteProperties => "CATALOG_WRITE_PROPERTIES",
    CatalogFullMetadata => "CATALOG_FULL_METADATA",
    CatalogListGrants => "CATALOG_LIST_GRANTS",
    CatalogManageGrantsOnSecurable => "CATALOG_MANAGE_GRANTS_ON_SECURABLE",
    NamespaceCreate => "NAMESPACE_CREATE",
    NamespaceDrop => "NAMESPACE_DROP",
    NamespaceList => "NAMESPACE_LIST",
    NamespaceReadProperties => "NAMESPACE_READ_PROPERTIES",
    NamespaceWriteProperties => "NAMESPACE_WRITE_PROPERTIES",
    NamespaceFullMetadata => "NAMESPACE_FULL_METADATA",
    NamespaceListGrants => "NAMESPACE_LIST_GRANTS",
    NamespaceManageGrantsOnSecurable => "NAMESPACE_MANAGE_GRANTS_ON_SECURABLE",
    TableCreate => "TABLE_CREATE",
    TableDrop => "TABLE_DROP",
    TableList => "TABLE_LIST",
    TableReadProperties => "TABLE_READ_PROPERTIES",
    TableWriteProperties => "TABLE_WRITE_PROPERTIES",
    TableReadData => "TABLE_READ_DATA",
    TableWriteData => "TABLE_WRITE_DATA",
    TableFullMetadata => "TABLE_FULL_METADATA",
    TableListGrants => "TABLE_LIST_GRANTS",
    TableManageGrantsOnSecurable => "TABLE_MANAGE_GRANTS_ON_SECURABLE",
    ViewCreate => "VIEW_CREATE",
    ViewDrop => "VIEW_DROP",
    ViewList => "VIEW_LIST",
    ViewReadProperties => "VIEW_READ_PROPERTIES",
    ViewWriteProperties => "VIEW_WRITE_PROPERTIES",
    ViewFullMetadata => "VIEW_FULL_METADATA",
    ViewListGrants => "VIEW_LIST_GRANTS",
    ViewManageGrantsOnSecurable => "VIEW_MANAGE_GRANTS_ON_SECURABLE",
}

/// A privilege name that is not one of Polaris's catalog privileges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown privilege {0:?}")]
pub struct UnknownPrivilege(pub String);

impl Privilege {
    /// The privileges that, when granted, satisfy `self` (including `self`).
    pub fn satisfied_by(self) -> &'static [Privilege] {
        use Privilege::*;
        match self {
            CatalogManageAccess => &[CatalogManageAccess],
            CatalogManageContent => &[CatalogManageContent],
            CatalogManageMetadata => &[CatalogManageMetadata, CatalogManageContent],
            CatalogReadProperties => &[
                CatalogReadProperties,
                CatalogWriteProperties,
                CatalogFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            CatalogWriteProperties => &[
                CatalogWriteProperties,
                CatalogFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            CatalogFullMetadata => &[CatalogFullMetadata],
            CatalogListGrants => &[
                CatalogListGrants,
                CatalogManageGrantsOnSecurable,
                CatalogManageAccess,
            ],
            CatalogManageGrantsOnSecurable => {
                &[CatalogManageGrantsOnSecurable, CatalogManageAccess]
            }
            NamespaceCreate => &[
                NamespaceCreate,
                NamespaceFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceDrop => &[
                NamespaceDrop,
                NamespaceFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceList => &[
                NamespaceList,
                NamespaceCreate,
                NamespaceFullMetadata,
                NamespaceReadProperties,
                NamespaceWriteProperties,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceReadProperties => &[
                NamespaceReadProperties,
                NamespaceWriteProperties,
                NamespaceFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceWriteProperties => &[
                NamespaceWriteProperties,
                NamespaceFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceFullMetadata => &[
                NamespaceFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            NamespaceListGrants => &[
                NamespaceListGrants,
                NamespaceManageGrantsOnSecurable,
                CatalogManageAccess,
            ],
            NamespaceManageGrantsOnSecurable => {
                &[NamespaceManageGrantsOnSecurable, CatalogManageAccess]
            }
            TableCreate => &[
                TableCreate,
                TableFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableDrop => &[
                TableDrop,
                TableFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableList => &[
                TableList,
                TableCreate,
                TableFullMetadata,
                TableReadData,
                TableReadProperties,
                TableWriteData,
                TableWriteProperties,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableReadProperties => &[
                TableReadProperties,
                TableFullMetadata,
                TableReadData,
                TableWriteData,
                TableWriteProperties,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableWriteProperties => &[
                TableWriteProperties,
                TableFullMetadata,
                TableWriteData,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableReadData => &[TableReadData, TableWriteData, CatalogManageContent],
            TableWriteData => &[TableWriteData, CatalogManageContent],
            TableFullMetadata => &[
                TableFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            TableListGrants => &[
                TableListGrants,
                TableManageGrantsOnSecurable,
                CatalogManageAccess,
            ],
            TableManageGrantsOnSecurable => &[TableManageGrantsOnSecurable, CatalogManageAccess],
            ViewCreate => &[
                ViewCreate,
                ViewFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewDrop => &[
                ViewDrop,
                ViewFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewList => &[
                ViewList,
                ViewCreate,
                ViewFullMetadata,
                ViewReadProperties,
                ViewWriteProperties,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewReadProperties => &[
                ViewReadProperties,
                ViewWriteProperties,
                ViewFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewWriteProperties => &[
                ViewWriteProperties,
                ViewFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewFullMetadata => &[
                ViewFullMetadata,
                CatalogManageContent,
                CatalogManageMetadata,
            ],
            ViewListGrants => &[
                ViewListGrants,
                ViewManageGrantsOnSecurable,
                CatalogManageAccess,
            ],
            ViewManageGrantsOnSecurable => &[ViewManageGrantsOnSecurable, CatalogManageAccess],
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Privilege {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Privilege {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for p in Privilege::ALL {
            assert_eq!(p.as_str().parse::<Privilege>(), Ok(*p));
            assert!(p.satisfied_by().contains(p), "{p} must satisfy itself");
        }
        assert_eq!(
            "TABLE_READ".parse::<Privilege>(),
            Err(UnknownPrivilege("TABLE_READ".into()))
        );
    }

    #[test]
    fn the_issue_table_holds() {
        use Privilege::*;
        let sat = |p: Privilege| p.satisfied_by().to_vec();
        assert_eq!(
            sat(TableReadData),
            vec![TableReadData, TableWriteData, CatalogManageContent]
        );
        assert_eq!(
            sat(TableWriteData),
            vec![TableWriteData, CatalogManageContent]
        );
        assert!(!sat(TableReadData).contains(&CatalogManageAccess));
        assert!(sat(TableList).contains(&TableReadData));
        assert!(sat(TableCreate).contains(&CatalogManageContent));
        assert!(sat(TableDrop).contains(&CatalogManageContent));
        assert!(sat(NamespaceList).contains(&CatalogManageContent));
        assert_eq!(sat(CatalogManageAccess), vec![CatalogManageAccess]);
        assert_eq!(sat(CatalogManageContent), vec![CatalogManageContent]);
    }
}
