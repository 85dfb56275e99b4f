-- Chinook: a digital music store (artists, albums, tracks, playlists, customers, invoices).
CREATE TABLE artist (
    artist_id INTEGER PRIMARY KEY,
    name TEXT
);
CREATE TABLE album (
    album_id INTEGER PRIMARY KEY,
    title TEXT NOT NULL,
    artist_id INTEGER NOT NULL REFERENCES artist (artist_id)
);
CREATE TABLE genre (
    genre_id INTEGER PRIMARY KEY,
    name TEXT
);
CREATE TABLE media_type (
    media_type_id INTEGER PRIMARY KEY,
    name TEXT
);
CREATE TABLE track (
    track_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    album_id INTEGER REFERENCES album (album_id),
    media_type_id INTEGER NOT NULL REFERENCES media_type (media_type_id),
    genre_id INTEGER REFERENCES genre (genre_id),
    composer TEXT,
    milliseconds INTEGER NOT NULL,
    bytes INTEGER,
    unit_price REAL NOT NULL
);
CREATE TABLE playlist (
    playlist_id INTEGER PRIMARY KEY,
    name TEXT
);
CREATE TABLE playlist_track (
    playlist_id INTEGER NOT NULL REFERENCES playlist (playlist_id),
    track_id INTEGER NOT NULL REFERENCES track (track_id),
    PRIMARY KEY (playlist_id, track_id)
);
CREATE TABLE employee (
    employee_id INTEGER PRIMARY KEY,
    last_name TEXT NOT NULL,
    first_name TEXT NOT NULL,
    title TEXT,
    reports_to INTEGER REFERENCES employee (employee_id),
    birth_date TEXT,
    hire_date TEXT,
    address TEXT,
    city TEXT,
    state TEXT,
    country TEXT,
    postal_code TEXT,
    phone TEXT,
    fax TEXT,
    email TEXT
);
CREATE TABLE customer (
    customer_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    company TEXT,
    address TEXT,
    city TEXT,
    state TEXT,
    country TEXT,
    postal_code TEXT,
    phone TEXT,
    fax TEXT,
    email TEXT NOT NULL,
    support_rep_id INTEGER REFERENCES employee (employee_id)
);
CREATE TABLE invoice (
    invoice_id INTEGER PRIMARY KEY,
    customer_id INTEGER NOT NULL REFERENCES customer (customer_id),
    invoice_date TEXT NOT NULL,
    billing_address TEXT,
    billing_city TEXT,
    billing_state TEXT,
    billing_country TEXT,
    billing_postal_code TEXT,
    total REAL NOT NULL
);
CREATE TABLE invoice_line (
    invoice_line_id INTEGER PRIMARY KEY,
    invoice_id INTEGER NOT NULL REFERENCES invoice (invoice_id),
    track_id INTEGER NOT NULL REFERENCES track (track_id),
    unit_price REAL NOT NULL,
    quantity INTEGER NOT NULL
);
