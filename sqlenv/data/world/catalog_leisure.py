"""Domain catalogue, part 3: travel and leisure (airline, music, sports, cinema, car rental, gym).

Same conventions as `catalog_public.py`. Some tables reference one parent twice under
different roles (a flight's origin and destination airport, a match's home and away
team), so questions must follow the right foreign key, not just the right table.
"""

from __future__ import annotations

from sqlenv.data.world.spec import Domain, cat, date, fk, label, num, table, text

COUNTRIES = "United States|Canada|Mexico|Brazil|United Kingdom|France|Germany|Japan|South Korea|Australia"

AIRLINE = Domain("airline", (
    table("country", "countries", (6, 12), label("name", "country"),
          cat("continent", "Europe|Asia|North America|South America|Africa|Oceania"), abbrev="ctry"),
    table("airport", "airports", (12, 24),
          label("name", "pattern", "{city} International Airport", "{city} Regional Airport", "{last} Field"),
          fk("country", skew=1.0), num("elevation in feet", "lognorm", 600, 1.2, 0, 9000, ident="elevation ft"),
          num("number of runways", "uniform", 1, 6, ident="runways"), abbrev="apt"),
    table("aircraft", "aircraft", (10, 20),
          label("tail number", "code", "N", 5),
          cat("model", "Boeing 737|Airbus A320|Boeing 787|Airbus A350|Embraer E190|Bombardier CRJ900|ATR 72"),
          num("seating capacity", "uniform", 50, 350, ident="seats"),
          num("year built", "uniform", 1998, 2023), abbrev="acft"),
    table("flight", "flights", (60, 140),
          label("flight number", "code", "FL", 4), fk("airport", role="origin airport", skew=1.0),
          fk("airport", role="destination airport", skew=1.0), fk("aircraft", skew=0.6),
          date("departure date", 2023, 2024), num("distance in miles", "lognorm", 900, 0.7, 100, 8000,
                                                 ident="distance miles"),
          cat("status", "On Time|Delayed|Cancelled|Diverted", skew=1.5), abbrev="flt"),
    table("passenger", "passengers", (60, 140),
          label("name", "person"), fk("country", role="home country", skew=1.2),
          date("birth date", 1940, 2015), cat("frequent flyer tier", "Basic|Silver|Gold|Platinum", skew=1.5,
                                               ident="ff tier"),
          text("email", "email"), abbrev="pax"),
    table("booking", "bookings", (150, 320),
          fk("passenger", skew=0.5), fk("flight", skew=0.9),
          cat("seat class", "Economy|Premium Economy|Business|First", skew=1.5),
          num("price", "lognorm", 350, 0.6, 40, 9000, real=True), date("booking date", 2022, 2024),
          abbrev="bkg"),
))

MUSIC = Domain("music", (
    table("record label", "record labels", (5, 10),
          label("name", "company"), cat("country", COUNTRIES), num("founding year", "uniform", 1940, 2015),
          abbrev="lbl"),
    table("artist", "artists", (20, 40),
          label("name", "pattern", "The {adj} {nouns}", "{first} {last}", "{adj} {noun}", "{noun} Collective"),
          fk("record label", skew=0.9),
          cat("genre", "Rock|Pop|Jazz|Hip Hop|Electronic|Country|Classical|Folk|R&B"),
          num("formation year", "uniform", 1960, 2022), cat("country", COUNTRIES, skew=1.3), abbrev="art"),
    table("album", "albums", (40, 90),
          label("title", "title"), fk("artist", skew=1.0), date("release date", 1970, 2024),
          num("price", "uniform", 5, 30, real=True), cat("format", "CD|Vinyl|Digital|Cassette"), abbrev="alb"),
    table("track", "tracks", (150, 320),
          label("title", "title"), fk("album", skew=0.3),
          num("duration in seconds", "lognorm", 225, 0.25, 60, 900, ident="duration sec"),
          num("play count", "lognorm", 20000, 1.5, 0, 50000000, ident="plays"),
          cat("mood", "Upbeat|Melancholic|Energetic|Calm|Dark", skew=0.8), abbrev="trk"),
))

SPORTS = Domain("sports", (
    table("league", "leagues", (3, 6),
          label("name", "pick", "Premier Division", "Coastal League", "Mountain Conference", "Metro League",
                "Northern League", "Valley Conference"),
          cat("country", COUNTRIES), num("founding year", "uniform", 1880, 2000), abbrev="lg"),
    table("team", "teams", (12, 24),
          label("name", "pattern", "{city} {nouns}", "{city} United", "{city} Rovers", "{city} Athletic"),
          fk("league", skew=0.5), num("founding year", "uniform", 1880, 2015),
          num("stadium capacity", "lognorm", 25000, 0.5, 3000, 90000),
          cat("primary color", "Red|Blue|Green|Black|White|Yellow|Orange|Purple"), abbrev="tm"),
    table("coach", "coaches", (12, 24),
          label("name", "person"), fk("team", skew=0.3), date("hire date", 2010, 2024),
          num("salary", "lognorm", 900000, 0.8, 60000, 15000000), abbrev="cch", optional=True),
    table("player", "players", (120, 260),
          label("name", "person"), fk("team", skew=0.2, null=0.03),
          cat("position", "Goalkeeper|Defender|Midfielder|Forward", skew=0.5), date("birth date", 1985, 2006),
          num("salary", "lognorm", 400000, 1.0, 30000, 20000000), num("goals", "lognorm", 4, 1.0, 0, 40),
          num("jersey number", "uniform", 1, 99), abbrev="plr"),
    table("match", "matches", (80, 180),
          fk("team", role="home team", skew=0.3), fk("team", role="away team", skew=0.3),
          date("match date", 2023, 2024), num("home score", "lognorm", 1.5, 0.7, 0, 7),
          num("away score", "lognorm", 1.2, 0.7, 0, 7), num("attendance", "lognorm", 15000, 0.6, 500, 90000),
          abbrev="mtch"),
))

CINEMA = Domain("cinema", (
    table("studio", "studios", (5, 10), label("name", "company"), cat("country", COUNTRIES),
          num("founding year", "uniform", 1910, 2015), abbrev="std"),
    table("director", "directors", (15, 30), label("name", "person"),
          cat("nationality", "American|British|French|Italian|Japanese|Korean|Mexican|Spanish"),
          num("birth year", "uniform", 1930, 1995), abbrev="dir"),
    table("film", "films", (50, 120),
          label("title", "title"), fk("studio", skew=1.0), fk("director", skew=1.1),
          date("release date", 1980, 2024),
          cat("genre", "Drama|Comedy|Action|Horror|Documentary|Animation|Thriller|Romance|Sci-Fi"),
          num("runtime in minutes", "lognorm", 105, 0.18, 70, 210, ident="runtime min"),
          num("budget", "lognorm", 20000000, 1.0, 100000, 300000000),
          num("box office", "lognorm", 50000000, 1.4, 10000, 2500000000, null=0.2),
          cat("age rating", "G|PG|PG-13|R|NC-17", ident="rating"), abbrev="flm"),
    table("actor", "actors", (40, 100), label("name", "person"), date("birth date", 1940, 2005),
          cat("gender", "Female|Male|Non-binary", skew=2.5), abbrev="act"),
    table("casting", "castings", (150, 320),
          fk("film", skew=0.4), fk("actor", skew=1.1), cat("role type", "Lead|Supporting|Cameo|Voice"),
          num("fee", "lognorm", 300000, 1.2, 5000, 30000000), abbrev="cst"),
))

CAR_RENTAL = Domain("car_rental", (
    table("location", "locations", (5, 12),
          label("name", "pattern", "{city} Airport", "{city} Downtown", "{street} Depot"),
          cat("country", COUNTRIES), num("number of parking spots", "uniform", 20, 300, ident="parking spots"),
          abbrev="loc"),
    table("car model", "car models", (8, 16),
          label("name", "pick", "Toyota Corolla", "Honda Civic", "Ford Focus", "Tesla Model 3", "BMW 3 Series",
                "Volkswagen Golf", "Kia Sportage", "Jeep Wrangler", "Nissan Leaf", "Audi A4", "Hyundai Tucson",
                "Mazda CX-5", "Chevrolet Malibu", "Volvo XC60", "Renault Clio", "Peugeot 208"),
          cat("category", "Economy|Compact|SUV|Luxury|Electric"), num("seats", "uniform", 2, 8),
          num("daily rate", "lognorm", 55, 0.4, 20, 300, real=True), abbrev="mdl"),
    table("car", "cars", (30, 80),
          label("plate number", "code", "CAR-", 4), fk("car model", role="model", skew=1.0),
          fk("location", skew=0.8), num("model year", "uniform", 2012, 2024),
          num("mileage", "lognorm", 40000, 0.8, 100, 250000),
          cat("color", "White|Black|Silver|Gray|Blue|Red", skew=0.8), abbrev="car"),
    table("customer", "customers", (40, 100),
          label("name", "person"), date("license date", 1975, 2023), date("birth date", 1950, 2005),
          cat("membership", "Standard|Gold|Business", skew=1.2), text("phone", "phone"), abbrev="cust"),
    table("rental", "rentals", (100, 250),
          fk("car", skew=0.6), fk("customer", skew=0.8), date("start date", 2022, 2024),
          num("number of days", "lognorm", 4, 0.6, 1, 30, ident="days"),
          num("total cost", "lognorm", 260, 0.7, 20, 6000, real=True),
          cat("status", "Completed|Active|Cancelled", skew=1.5), abbrev="rnt"),
))

GYM = Domain("gym", (
    table("gym", "gyms", (4, 8),
          label("name", "pattern", "{city} Fitness", "Iron {noun} Gym", "{adj} Athletics", "{last} Health Club"),
          cat("city", "Austin|Denver|Seattle|Boston|Atlanta|Phoenix|Portland"),
          num("opening year", "uniform", 1995, 2023), num("monthly fee", "uniform", 15, 120, real=True),
          abbrev="gym"),
    table("trainer", "trainers", (12, 28),
          label("name", "person"), fk("gym", skew=0.6),
          cat("specialty", "Yoga|Strength|Cardio|Pilates|CrossFit|Boxing|Swimming"),
          num("hourly rate", "lognorm", 50, 0.3, 20, 150, real=True),
          num("years of experience", "lognorm", 6, 0.6, 1, 30, ident="experience years"), abbrev="trn"),
    table("member", "members", (60, 140),
          label("name", "person"), fk("gym", skew=0.9), date("join date", 2015, 2024),
          cat("plan", "Monthly|Annual|Student|Family|Off-Peak", skew=1.0), num("age", "uniform", 16, 80),
          abbrev="mbr"),
    table("session", "sessions", (150, 320),
          fk("trainer", skew=1.0), fk("member", skew=0.7), date("session date", 2023, 2024),
          num("duration in minutes", "uniform", 30, 120, ident="minutes"),
          num("calories burned", "lognorm", 400, 0.4, 80, 1500, ident="calories"), abbrev="ses"),
))

LEISURE_DOMAINS = (AIRLINE, MUSIC, SPORTS, CINEMA, CAR_RENTAL, GYM)
